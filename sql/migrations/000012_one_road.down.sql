-- Back to lot terms in a side table, lifetimes in session settings, and the expiry of a refilled lot
-- posted by ledger_lots itself: the functions of migration 000009, restored verbatim. Entries keep their
-- rows; what the new columns said is lost with them (keys still say it for expiries, voids and restores).

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

-- lots_ttl reads a lot lifetime from the session (set by the server from its configuration).
CREATE FUNCTION lots_ttl(p_setting text) RETURNS interval
    LANGUAGE sql STABLE AS
$$
SELECT nullif(current_setting(p_setting, true), '')::interval;
$$;

COMMENT ON FUNCTION lots_ttl(text) IS
    'The lifetime named by a session setting (onceledger.paid_credit_ttl, onceledger.grant_ttl), which the '
    'server sets on each connection from PAID_CREDIT_TTL and GRANT_TTL; null (never expires) when unset.';

CREATE OR REPLACE FUNCTION lots_apply_entry(e ledger) RETURNS void
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

CREATE OR REPLACE FUNCTION ledger_lots_apply() RETURNS trigger
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

DROP FUNCTION ledger_append(text[], text[], bigint[], text[], text[], text[], boolean[], bigint[], text[], text[], smallint[], text[], float8[], bigint);
DROP FUNCTION stripe_events_lock_parked(text);
DROP FUNCTION ledger_batches(text[]);
DROP FUNCTION claim_keys(text[], text[]);
DROP FUNCTION ledger_keys_taken(text[]);
DROP FUNCTION accounts_lock(text[], bigint);

ALTER TABLE ledger
    DROP CONSTRAINT ledger_lot_terms_check,
    DROP CONSTRAINT ledger_reverses_check,
    DROP CONSTRAINT ledger_lot_id_check,
    DROP COLUMN lot_expires_at,
    DROP COLUMN lot_priority,
    DROP COLUMN lot_category,
    DROP COLUMN reverses_entry_id,
    DROP COLUMN lot_id;
