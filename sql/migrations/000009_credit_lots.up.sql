-- Credit lots (SPEC §12): every credit lands in a lot, every debit draws lots down in one fixed order,
-- and expiry is a ledger entry.
--
-- The database holds the lots, as it holds the chain: the statement-level trigger ledger_lots runs
-- after ledger_chain on every INSERT into the ledger (trigger names fire in order), on the rows of the
-- accounts the statement posted to, whose rows every posting path has locked before inserting. The
-- order of an account's entries (seq) is therefore the order its lots are drawn in, and no posting path
-- (single, group commit, billing, hold capture, webhook reversals, expiry, recharge) carries lot code of
-- its own or can forget it. Every statement the trigger runs touches rows of those accounts only.
--
-- Draw order, for every debit: priority, then expires_at (nulls last), then promotional before paid,
-- then lot id. A refund or dispute draws first from the lot of its own payment (the lot made by the
-- topup entry with the same payment_intent). A debit beyond every open lot still posts in full: the
-- uncovered part is the account's debt (lot_debts), which the next credit's lot draws first, oldest
-- debit first, so that every debit ends fully drawn. Restores (refund_restore, dispute_won) refill the
-- lots their reversal drew, amount for amount (lot_refills); a refilled lot that is closed or past its
-- expiry has the credit expire at once (a new expiry or void entry).

ALTER TABLE ledger DROP CONSTRAINT ledger_kind_sign_check;
ALTER TABLE ledger ADD CONSTRAINT ledger_kind_sign_check CHECK (
    CASE kind
        WHEN 'topup'          THEN amount > 0
        WHEN 'grant'          THEN amount > 0
        WHEN 'refund_restore' THEN amount > 0
        WHEN 'dispute_won'    THEN amount > 0
        WHEN 'usage'          THEN amount < 0
        WHEN 'refund'         THEN amount < 0
        WHEN 'dispute'        THEN amount < 0
        WHEN 'expiry'         THEN amount < 0
        WHEN 'void'           THEN amount < 0
        WHEN 'adjustment'     THEN amount <> 0
        ELSE false
    END
);
COMMENT ON CONSTRAINT ledger_kind_sign_check ON ledger IS
    'Credits are positive and debits negative, per kind: topup, grant, refund_restore, dispute_won > 0; '
    'usage, refund, dispute, expiry, void < 0; adjustment non-zero. Any other kind is refused.';

CREATE TABLE credit_lots (
    account_id text        NOT NULL,
    id         bigint      GENERATED ALWAYS AS IDENTITY,
    entry_id   bigint      NOT NULL,
    category   text        NOT NULL,
    priority   smallint    NOT NULL DEFAULT 50,
    amount     bigint      NOT NULL,
    remaining  bigint      NOT NULL,
    expires_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    closed_at  timestamptz,
    CONSTRAINT credit_lots_pkey PRIMARY KEY (account_id, id),
    CONSTRAINT credit_lots_entry_key UNIQUE (account_id, entry_id),
    CONSTRAINT credit_lots_account_fk FOREIGN KEY (account_id) REFERENCES accounts (id),
    CONSTRAINT credit_lots_category_check CHECK (category IN ('paid', 'promotional')),
    CONSTRAINT credit_lots_priority_check CHECK (priority BETWEEN 0 AND 100),
    CONSTRAINT credit_lots_amount_positive_check CHECK (amount > 0),
    CONSTRAINT credit_lots_remaining_check CHECK (0 <= remaining AND remaining <= amount)
);

COMMENT ON TABLE credit_lots IS
    'One lot per credit entry: the credit, what is left of it, and where it stands in the draw order. Made '
    'and drawn only by the trigger ledger_lots; closed by expiry and void entries.';
COMMENT ON COLUMN credit_lots.entry_id IS
    'The ledger entry (a credit) that made the lot.';
COMMENT ON COLUMN credit_lots.category IS
    'paid (top-ups, restores beyond their reversal) or promotional (the signup grant, positive '
    'adjustments unless they say otherwise); promotional lots are drawn before paid ones of the same '
    'priority and expiry.';
COMMENT ON COLUMN credit_lots.priority IS
    'Drawn lowest first (0-100, default 50); the first key of the draw order.';
COMMENT ON COLUMN credit_lots.amount IS
    'The credit the lot holds: its entry''s amount (for a restore, the part no reversal draw took it back '
    'to); for a lot made by migration 000009, the part of its credit still unspent then. Debt it repaid is '
    'among its lot_draws.';
COMMENT ON COLUMN credit_lots.remaining IS
    'What is left: amount - its lot_draws + its lot_refills (verify checks it). Open lots'' remaining '
    'less lot_debts is the account''s balance.';
COMMENT ON COLUMN credit_lots.expires_at IS
    'When the remaining expires (null: never); the reconciler pass posts the expiry entry. Second key of '
    'the draw order, nulls last.';
COMMENT ON COLUMN credit_lots.closed_at IS
    'Set when an expiry or void entry took the remaining; a closed lot is never drawn again (a refill of a '
    'closed lot expires at once).';
COMMENT ON CONSTRAINT credit_lots_pkey ON credit_lots IS
    'A lot lives under its account, so that lots shard with it (SPEC §15).';
COMMENT ON CONSTRAINT credit_lots_entry_key ON credit_lots IS
    'A credit makes at most one lot.';
COMMENT ON CONSTRAINT credit_lots_account_fk ON credit_lots IS
    'Every lot belongs to an existing account.';
COMMENT ON CONSTRAINT credit_lots_category_check ON credit_lots IS
    'A lot is paid or promotional.';
COMMENT ON CONSTRAINT credit_lots_priority_check ON credit_lots IS
    'Priorities run from 0 (drawn first) to 100.';
COMMENT ON CONSTRAINT credit_lots_amount_positive_check ON credit_lots IS
    'A lot holds a positive credit.';
COMMENT ON CONSTRAINT credit_lots_remaining_check ON credit_lots IS
    'A lot is never overdrawn nor refilled beyond its amount: 0 <= remaining <= amount.';

CREATE INDEX credit_lots_open_idx ON credit_lots (account_id) WHERE closed_at IS NULL;
COMMENT ON INDEX credit_lots_open_idx IS
    'An account''s open lots, which every debit reads in draw order; remaining is not indexed, so drawing '
    'a lot is a HOT update.';
CREATE INDEX credit_lots_expires_idx ON credit_lots (expires_at) WHERE closed_at IS NULL AND expires_at IS NOT NULL;
COMMENT ON INDEX credit_lots_expires_idx IS
    'The open lots whose time is up, for the expiry pass and verify.';
CREATE INDEX credit_lots_id_idx ON credit_lots (id);
COMMENT ON INDEX credit_lots_id_idx IS
    'Finds a lot by its id alone (POST /v1/lots/{id}/void).';

CREATE TABLE lot_draws (
    account_id text   NOT NULL,
    entry_id   bigint NOT NULL,
    lot_id     bigint NOT NULL,
    amount     bigint NOT NULL,
    CONSTRAINT lot_draws_pkey PRIMARY KEY (account_id, entry_id, lot_id),
    CONSTRAINT lot_draws_lot_fk FOREIGN KEY (account_id, lot_id) REFERENCES credit_lots (account_id, id),
    CONSTRAINT lot_draws_amount_positive_check CHECK (amount > 0)
);

COMMENT ON TABLE lot_draws IS
    'Which debit took how much from which lot, written by the trigger ledger_lots. A debit''s draws sum to '
    'its amount once its debt is repaid; an expiry or void entry draws its own lot.';
COMMENT ON COLUMN lot_draws.entry_id IS
    'The debit (ledger entry id) that drew.';
COMMENT ON CONSTRAINT lot_draws_pkey ON lot_draws IS
    'One row per debit and lot (a later repayment from the same lot adds to it); the account leads (§15).';
COMMENT ON CONSTRAINT lot_draws_lot_fk ON lot_draws IS
    'A draw takes from an existing lot of the same account.';
COMMENT ON CONSTRAINT lot_draws_amount_positive_check ON lot_draws IS
    'A draw takes a positive amount.';

CREATE TABLE lot_refills (
    account_id text   NOT NULL,
    entry_id   bigint NOT NULL,
    lot_id     bigint NOT NULL,
    amount     bigint NOT NULL,
    CONSTRAINT lot_refills_pkey PRIMARY KEY (account_id, entry_id, lot_id),
    CONSTRAINT lot_refills_lot_fk FOREIGN KEY (account_id, lot_id) REFERENCES credit_lots (account_id, id),
    CONSTRAINT lot_refills_amount_positive_check CHECK (amount > 0)
);

COMMENT ON TABLE lot_refills IS
    'What a restore (refund_restore, dispute_won) gave back to each lot its reversal drew, amount for amount.';
COMMENT ON COLUMN lot_refills.entry_id IS
    'The restore (ledger entry id) that refilled.';
COMMENT ON CONSTRAINT lot_refills_pkey ON lot_refills IS
    'One row per restore and lot; the account leads (§15).';
COMMENT ON CONSTRAINT lot_refills_lot_fk ON lot_refills IS
    'A refill goes to an existing lot of the same account.';
COMMENT ON CONSTRAINT lot_refills_amount_positive_check ON lot_refills IS
    'A refill gives back a positive amount.';

CREATE TABLE lot_debts (
    account_id text   NOT NULL,
    entry_id   bigint NOT NULL,
    seq        bigint NOT NULL,
    uncovered  bigint NOT NULL,
    CONSTRAINT lot_debts_pkey PRIMARY KEY (account_id, entry_id),
    CONSTRAINT lot_debts_account_fk FOREIGN KEY (account_id) REFERENCES accounts (id),
    CONSTRAINT lot_debts_uncovered_positive_check CHECK (uncovered > 0)
);

COMMENT ON TABLE lot_debts IS
    'The debits not yet fully drawn: the account''s debt, debit by debit. The next credit''s lot draws them '
    'oldest first (by seq) and the row goes once the debit is covered.';
COMMENT ON COLUMN lot_debts.seq IS
    'The debit''s seq: debts are repaid in this order.';
COMMENT ON COLUMN lot_debts.uncovered IS
    'The part of the debit no lot has covered yet.';
COMMENT ON CONSTRAINT lot_debts_pkey ON lot_debts IS
    'One row per uncovered debit; the account leads (§15).';
COMMENT ON CONSTRAINT lot_debts_account_fk ON lot_debts IS
    'A debt belongs to an existing account.';
COMMENT ON CONSTRAINT lot_debts_uncovered_positive_check ON lot_debts IS
    'A covered debit has no row.';

CREATE TABLE lot_terms (
    account_id text        NOT NULL,
    dedupe_key text        NOT NULL,
    category   text        NOT NULL,
    priority   smallint    NOT NULL,
    expires_at timestamptz,
    CONSTRAINT lot_terms_pkey PRIMARY KEY (account_id, dedupe_key),
    CONSTRAINT lot_terms_account_fk FOREIGN KEY (account_id) REFERENCES accounts (id),
    CONSTRAINT lot_terms_category_check CHECK (category IN ('paid', 'promotional')),
    CONSTRAINT lot_terms_priority_check CHECK (priority BETWEEN 0 AND 100)
);

COMMENT ON TABLE lot_terms IS
    'The lot a credit asked for before it was posted (a positive adjustment''s category, priority and '
    'expiry), found by the credit''s dedupe key when ledger_lots makes its lot. The first terms stored '
    'under a key stand.';
COMMENT ON CONSTRAINT lot_terms_pkey ON lot_terms IS
    'One set of terms per credit key; the account leads (§15).';
COMMENT ON CONSTRAINT lot_terms_account_fk ON lot_terms IS
    'Terms belong to an existing account.';
COMMENT ON CONSTRAINT lot_terms_category_check ON lot_terms IS
    'A lot is paid or promotional.';
COMMENT ON CONSTRAINT lot_terms_priority_check ON lot_terms IS
    'Priorities run from 0 (drawn first) to 100.';

-- lots_draw allocates debits (or repaid debts) across the open lots of their accounts in draw order, in
-- one statement of running sums: the demands in seq order per account against the lots' remaining in
-- draw order, each overlap of the two running intervals a draw.
CREATE FUNCTION lots_draw(p_accounts text[], p_entries bigint[], p_seqs bigint[], p_needs bigint[], p_first_lot bigint, p_repay boolean)
    RETURNS void
    LANGUAGE sql AS
$$
WITH demand AS (
    SELECT d.account_id, d.entry_id, d.seq, d.need,
           sum(d.need) OVER (PARTITION BY d.account_id ORDER BY d.seq ROWS UNBOUNDED PRECEDING) - d.need AS lo
    FROM unnest(p_accounts, p_entries, p_seqs, p_needs) AS d (account_id, entry_id, seq, need)
), totals AS (
    SELECT account_id, sum(need) AS total FROM demand GROUP BY account_id
), supply AS MATERIALIZED (
    -- Per account (a lateral: many small in-memory sorts, not one sort of every lot), and only the
    -- lots the demands reach: a chunk of usage rarely gets past the first.
    SELECT t.account_id, s.lot_id, s.remaining, s.lo
    FROM totals t
    CROSS JOIN LATERAL (
        SELECT l.id AS lot_id, l.remaining,
               sum(l.remaining) OVER (
                   ORDER BY coalesce(l.id = p_first_lot, false) DESC, l.priority, l.expires_at NULLS LAST,
                            l.category = 'paid', l.id
                   ROWS UNBOUNDED PRECEDING) - l.remaining AS lo
        FROM credit_lots l
        WHERE l.account_id = t.account_id AND l.closed_at IS NULL AND l.remaining > 0
    ) s
    WHERE s.lo < t.total
), draws AS MATERIALIZED (
    SELECT d.account_id, d.entry_id, s.lot_id,
           (least(d.lo + d.need, s.lo + s.remaining) - greatest(d.lo, s.lo))::bigint AS amount
    FROM demand d
    JOIN supply s ON s.account_id = d.account_id AND s.lo < d.lo + d.need AND d.lo < s.lo + s.remaining
), drawn AS (
    -- New debits draw for the first time: a plain insert (billing's path).
    INSERT INTO lot_draws (account_id, entry_id, lot_id, amount)
    SELECT account_id, entry_id, lot_id, amount FROM draws WHERE NOT p_repay
), redrawn AS (
    -- A repaid debit may draw again from a lot it drew before (refilled since): add to that row.
    INSERT INTO lot_draws (account_id, entry_id, lot_id, amount)
    SELECT account_id, entry_id, lot_id, amount FROM draws WHERE p_repay
    ON CONFLICT (account_id, entry_id, lot_id) DO UPDATE SET amount = lot_draws.amount + excluded.amount
), lots AS (
    UPDATE credit_lots l
    SET remaining = l.remaining - t.amount
    FROM (SELECT account_id, lot_id, sum(amount)::bigint AS amount FROM draws GROUP BY account_id, lot_id) t
    WHERE l.account_id = t.account_id AND l.id = t.lot_id
), uncovered AS MATERIALIZED (
    SELECT d.account_id, d.entry_id, d.seq, (d.need - coalesce(w.amount, 0))::bigint AS uncovered
    FROM demand d
    LEFT JOIN (SELECT account_id, entry_id, sum(amount) AS amount FROM draws GROUP BY account_id, entry_id) w
        ON w.account_id = d.account_id AND w.entry_id = d.entry_id
), owed AS (
    INSERT INTO lot_debts (account_id, entry_id, seq, uncovered)
    SELECT account_id, entry_id, seq, uncovered FROM uncovered WHERE uncovered > 0
    ON CONFLICT (account_id, entry_id) DO UPDATE SET uncovered = excluded.uncovered
)
DELETE FROM lot_debts x
USING uncovered u
WHERE u.uncovered = 0 AND x.account_id = u.account_id AND x.entry_id = u.entry_id;
$$;

COMMENT ON FUNCTION lots_draw(text[], bigint[], bigint[], bigint[], bigint, boolean) IS
    'Draws the demands (account, entry, seq, amount needed; arrays in lockstep) from their accounts'' open '
    'lots in draw order (p_first_lot first, when given), set-based: lot_draws, lots'' remaining, and '
    'lot_debts for what no lot covered. p_repay: the demands are debts already owed (their lot_debts rows '
    'are updated or deleted). Called by ledger_lots under the accounts'' row locks.';

-- lots_repay lets an account's debts draw its open lots, oldest debit first.
CREATE FUNCTION lots_repay(p_account text) RETURNS void
    LANGUAGE sql AS
$$
SELECT lots_draw(array_agg(account_id), array_agg(entry_id), array_agg(seq), array_agg(uncovered), NULL, true)
FROM lot_debts
WHERE account_id = p_account
HAVING count(*) > 0;
$$;

COMMENT ON FUNCTION lots_repay(text) IS
    'Repays an account''s debt from its open lots: each uncovered debit, oldest first, draws in draw order.';

-- lots_ttl reads a lot lifetime from the session (set by the server from its configuration).
CREATE FUNCTION lots_ttl(p_setting text) RETURNS interval
    LANGUAGE sql STABLE AS
$$
SELECT nullif(current_setting(p_setting, true), '')::interval;
$$;

COMMENT ON FUNCTION lots_ttl(text) IS
    'The lifetime named by a session setting (onceledger.paid_credit_ttl, onceledger.grant_ttl), which the '
    'server sets on each connection from PAID_CREDIT_TTL and GRANT_TTL; null (never expires) when unset.';

-- lots_apply_entry moves the lots of one entry's account for that entry: the one place for the per-entry
-- rules, called by ledger_lots_apply here and by the row-level ledger_lots on Citus (sql/citus).
CREATE FUNCTION lots_apply_entry(e ledger) RETURNS void
    LANGUAGE plpgsql AS
$$
DECLARE
    first_lot  bigint;
    reversal   bigint;
    refilled   bigint;
    rest       bigint;
    cancelled  bigint;
BEGIN
    CASE
    WHEN e.kind IN ('expiry', 'void') THEN
        -- Keyed expire:{lot_id}[:...] or void:{lot_id}[:...]: takes that lot's remaining and closes it.
        first_lot := split_part(e.dedupe_key, ':', 2)::bigint;
        INSERT INTO lot_draws (account_id, entry_id, lot_id, amount)
        VALUES (e.account_id, e.id, first_lot, -e.amount);
        UPDATE credit_lots
        SET remaining = remaining + e.amount, closed_at = coalesce(closed_at, e.created_at)
        WHERE account_id = e.account_id AND id = first_lot;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'entry % takes lot % of account %, which does not exist', e.id, first_lot, e.account_id
                USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'lot_draws_lot_fk',
                      DETAIL = 'constraint lot_draws_lot_fk on table lot_draws';
        END IF;

    WHEN e.amount < 0 THEN
        -- A refund or dispute draws its own payment's lot first.
        first_lot := NULL;
        IF e.kind IN ('refund', 'dispute') AND e.payment_intent IS NOT NULL THEN
            SELECT l.id INTO first_lot
            FROM credit_lots l
            JOIN ledger c ON c.id = l.entry_id AND c.account_id = l.account_id
            WHERE l.account_id = e.account_id AND c.account_id = e.account_id
              AND c.kind = 'topup' AND c.payment_intent = e.payment_intent
            ORDER BY l.id
            LIMIT 1;
        END IF;
        PERFORM lots_draw(ARRAY[e.account_id], ARRAY[e.id], ARRAY[e.seq], ARRAY[-e.amount], first_lot, false);

    WHEN e.kind IN ('refund_restore', 'dispute_won') THEN
        -- The reversal it undoes: the key of the same refund or dispute.
        SELECT r.id INTO reversal
        FROM ledger r
        WHERE r.dedupe_key = CASE e.kind
                  WHEN 'refund_restore' THEN regexp_replace(e.dedupe_key, '^stripe:refund-failed:', 'stripe:refund:')
                  ELSE regexp_replace(e.dedupe_key, '^stripe:dispute-won:', 'stripe:dispute:')
              END
          AND r.account_id = e.account_id;
        -- Refill the lots the reversal drew, amount for amount, up to the restore.
        WITH d AS (
            SELECT lot_id, amount,
                   sum(amount) OVER (ORDER BY lot_id ROWS UNBOUNDED PRECEDING) - amount AS lo
            FROM lot_draws
            WHERE account_id = e.account_id AND entry_id = reversal
        ), refill AS (
            SELECT lot_id, least(amount, e.amount - lo)::bigint AS amount FROM d WHERE lo < e.amount
        ), recorded AS (
            INSERT INTO lot_refills (account_id, entry_id, lot_id, amount)
            SELECT e.account_id, e.id, lot_id, amount FROM refill
        ), moved AS (
            UPDATE credit_lots l
            SET remaining = l.remaining + r.amount
            FROM refill r
            WHERE l.account_id = e.account_id AND l.id = r.lot_id
        )
        SELECT coalesce(sum(amount), 0) INTO refilled FROM refill;
        -- What no lot gave: first the reversal's own debt, if still owed, then a new paid lot.
        rest := e.amount - refilled;
        SELECT least(coalesce(max(uncovered), 0), rest) INTO cancelled
        FROM lot_debts
        WHERE account_id = e.account_id AND entry_id = reversal;
        IF cancelled > 0 THEN
            UPDATE lot_debts SET uncovered = uncovered - cancelled
            WHERE account_id = e.account_id AND entry_id = reversal AND uncovered > cancelled;
            DELETE FROM lot_debts WHERE account_id = e.account_id AND entry_id = reversal AND uncovered = cancelled;
        END IF;
        IF rest - cancelled > 0 THEN
            INSERT INTO credit_lots (account_id, entry_id, category, amount, remaining, created_at)
            VALUES (e.account_id, e.id, 'paid', rest - cancelled, rest - cancelled, e.created_at);
        END IF;
        -- A refilled lot that is closed or past its expiry: what it holds goes at once, as an expiry,
        -- or as a void when the lot was closed before its time (voided).
        WITH gone AS (
            SELECT l.id, l.remaining,
                   CASE WHEN l.expires_at <= e.created_at OR l.closed_at IS NULL THEN 'expiry' ELSE 'void' END AS kind
            FROM credit_lots l
            JOIN lot_refills f ON f.account_id = l.account_id AND f.lot_id = l.id AND f.entry_id = e.id
            WHERE l.account_id = e.account_id AND f.account_id = e.account_id
              AND l.remaining > 0
              AND (l.closed_at IS NOT NULL OR l.expires_at <= e.created_at)
        ), steps AS (
            SELECT g.*, row_number() OVER (ORDER BY g.id) AS k,
                   sum(g.remaining) OVER (ORDER BY g.id ROWS UNBOUNDED PRECEDING) AS taken
            FROM gone g
        )
        INSERT INTO ledger (account_id, kind, amount, description, dedupe_key, seq, balance_after)
        SELECT a.id, s.kind, -s.remaining,
               s.kind || ' of lot ' || s.id || ' refilled by entry ' || e.id,
               CASE s.kind WHEN 'expiry' THEN 'expire:' ELSE 'void:' END || s.id || ':' || e.id,
               a.last_seq + s.k, a.balance - s.taken
        FROM steps s
        JOIN accounts a ON a.id = e.account_id
        ORDER BY s.k;
        PERFORM lots_repay(e.account_id);

    ELSE
        -- topup, grant, or a positive adjustment: a new lot, which repays any debt first.
        INSERT INTO credit_lots (account_id, entry_id, category, priority, amount, remaining, expires_at, created_at)
        SELECT e.account_id, e.id, t.category, coalesce(t.priority, 50), e.amount, e.amount,
               coalesce(t.expires_at, e.created_at + CASE e.kind
                   WHEN 'topup' THEN lots_ttl('onceledger.paid_credit_ttl')
                   WHEN 'grant' THEN lots_ttl('onceledger.grant_ttl')
               END),
               e.created_at
        FROM (
            SELECT coalesce(max(x.category), CASE e.kind WHEN 'topup' THEN 'paid' ELSE 'promotional' END) AS category,
                   max(x.priority) AS priority, max(x.expires_at) AS expires_at
            FROM lot_terms x
            WHERE x.account_id = e.account_id AND x.dedupe_key = e.dedupe_key
        ) t;
        PERFORM lots_repay(e.account_id);
    END CASE;
END;
$$;

COMMENT ON FUNCTION lots_apply_entry(ledger) IS
    'One entry''s lot work, under its account''s lock: a credit makes its lot (and repays debt), a debit draws '
    'in draw order (a refund or dispute its payment''s lot first), a restore refills what its reversal drew, '
    'an expiry or void entry takes and closes its lot.';

CREATE FUNCTION ledger_lots_apply() RETURNS trigger
    LANGUAGE plpgsql AS
$$
DECLARE
    e          ledger;
BEGIN
    -- A statement of plain debits (billing, usage, negative adjustments, captures): one allocation.
    IF NOT EXISTS (
        SELECT 1 FROM new_entries WHERE amount > 0 OR kind IN ('refund', 'dispute', 'expiry', 'void')
    ) THEN
        PERFORM lots_draw(array_agg(account_id), array_agg(id), array_agg(seq), array_agg(-amount), NULL, false)
        FROM new_entries
        HAVING count(*) > 0;
        RETURN NULL;
    END IF;

    -- A statement of plain credits (top-ups, grants, positive adjustments; a group commit of them) on
    -- accounts without debt: one lot per credit, in one statement, since there is no debt to repay.
    IF NOT EXISTS (
        SELECT 1 FROM new_entries WHERE amount < 0 OR kind IN ('refund_restore', 'dispute_won')
    ) AND NOT EXISTS (
        SELECT 1 FROM lot_debts d WHERE d.account_id IN (SELECT account_id FROM new_entries)
    ) THEN
        INSERT INTO credit_lots (account_id, entry_id, category, priority, amount, remaining, expires_at, created_at)
        SELECT n.account_id, n.id,
               coalesce(t.category, CASE n.kind WHEN 'topup' THEN 'paid' ELSE 'promotional' END),
               coalesce(t.priority, 50), n.amount, n.amount,
               coalesce(t.expires_at, n.created_at + CASE n.kind
                   WHEN 'topup' THEN lots_ttl('onceledger.paid_credit_ttl')
                   WHEN 'grant' THEN lots_ttl('onceledger.grant_ttl')
               END),
               n.created_at
        FROM new_entries n
        LEFT JOIN lot_terms t ON t.account_id = n.account_id AND t.dedupe_key = n.dedupe_key
        ORDER BY n.account_id, n.seq;
        RETURN NULL;
    END IF;

    -- Otherwise entry by entry, in each account's seq order; each step is itself set-based.
    FOR e IN SELECT * FROM new_entries ORDER BY account_id, seq LOOP
        PERFORM lots_apply_entry(e);
    END LOOP;
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION ledger_lots_apply() IS
    'After each INSERT statement on the ledger (after ledger_chain): credits make lots (and repay debt), '
    'debits draw lots in draw order, refunds and disputes their payment''s lot first, restores refill what '
    'their reversal drew, expiry and void entries take and close their lot. Plain debits only: one '
    'set-based allocation for the whole statement; plain credits on accounts without debt: one insert of '
    'their lots.';

CREATE TRIGGER ledger_lots
    AFTER INSERT ON ledger
    REFERENCING NEW TABLE AS new_entries
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_lots_apply();

COMMENT ON TRIGGER ledger_lots ON ledger IS
    'Every entry moves the lots of its account in the statement that inserts it, in seq order under the '
    'account lock: no posting path can forget a lot, and the order is the ledger''s.';

-- Backfill, set-based: each account's balance becomes lots of the credits still unspent, the oldest
-- credits counted spent first (what a first-in, first-out reading of the history says is left); a
-- negative balance becomes the debt of its newest debits.
INSERT INTO credit_lots (account_id, entry_id, category, amount, remaining, created_at)
SELECT account_id, id, CASE kind WHEN 'grant' THEN 'promotional' WHEN 'adjustment' THEN 'promotional' ELSE 'paid' END,
       unspent, unspent, created_at
FROM (
    SELECT l.account_id, l.id, l.kind, l.created_at,
           least(l.amount, sum(l.amount) OVER w - (c.credits - a.balance))::bigint AS unspent
    FROM ledger l
    JOIN accounts a ON a.id = l.account_id AND a.balance > 0
    JOIN (SELECT account_id, sum(amount) AS credits FROM ledger WHERE amount > 0 GROUP BY account_id) c
        ON c.account_id = l.account_id
    WHERE l.amount > 0
    WINDOW w AS (PARTITION BY l.account_id ORDER BY l.seq ROWS UNBOUNDED PRECEDING)
) credits
WHERE unspent > 0
ORDER BY account_id, id;

INSERT INTO lot_debts (account_id, entry_id, seq, uncovered)
SELECT account_id, id, seq, least(-amount, owed - (taken + amount))::bigint
FROM (
    SELECT l.account_id, l.id, l.seq, l.amount, -a.balance AS owed,
           -sum(l.amount) OVER (PARTITION BY l.account_id ORDER BY l.seq DESC ROWS UNBOUNDED PRECEDING) AS taken
    FROM ledger l
    JOIN accounts a ON a.id = l.account_id AND a.balance < 0
    WHERE l.amount < 0
) debits
WHERE taken + amount < owed;
