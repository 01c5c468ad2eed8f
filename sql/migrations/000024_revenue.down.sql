-- Back to 000023: lots, entries and orders lose their price, accounts their unit, and the recognitions go.
-- The functions are restored verbatim: ledger_append of 000023, lots_draw and lots_repay of 000009,
-- lots_apply_entry and ledger_lots_apply of 000012.

DROP FUNCTION ledger_append(text[], text[], bigint[], text[], text[], text[], boolean[], bigint[], text[], text[], smallint[], text[], float8[], bigint, text[], text[], bigint[], text[]);
DROP FUNCTION lots_repay(text, bigint, timestamptz);
DROP FUNCTION lots_draw(text[], bigint[], bigint[], bigint[], bigint, boolean, text[], bigint[], timestamptz[]);

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

CREATE OR REPLACE FUNCTION lots_apply_entry(e ledger) RETURNS void
    LANGUAGE plpgsql AS
$$
DECLARE
    first_lot  bigint;
    refilled   bigint;
    rest       bigint;
    cancelled  bigint;
BEGIN
    CASE
    WHEN e.kind IN ('expiry', 'void') THEN
        -- Takes its lot's remaining and closes it.
        INSERT INTO lot_draws (account_id, entry_id, lot_id, amount)
        VALUES (e.account_id, e.id, e.lot_id, -e.amount);
        UPDATE credit_lots
        SET remaining = remaining + e.amount, closed_at = coalesce(closed_at, e.created_at)
        WHERE account_id = e.account_id AND id = e.lot_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'entry % takes lot % of account %, which does not exist', e.id, e.lot_id, e.account_id
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
        -- Refill the lots the reversal drew, amount for amount, up to the restore.
        WITH d AS (
            SELECT lot_id, amount,
                   sum(amount) OVER (ORDER BY lot_id ROWS UNBOUNDED PRECEDING) - amount AS lo
            FROM lot_draws
            WHERE account_id = e.account_id AND entry_id = e.reverses_entry_id
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
        WHERE account_id = e.account_id AND entry_id = e.reverses_entry_id;
        IF cancelled > 0 THEN
            UPDATE lot_debts SET uncovered = uncovered - cancelled
            WHERE account_id = e.account_id AND entry_id = e.reverses_entry_id AND uncovered > cancelled;
            DELETE FROM lot_debts WHERE account_id = e.account_id AND entry_id = e.reverses_entry_id AND uncovered = cancelled;
        END IF;
        IF rest - cancelled > 0 THEN
            INSERT INTO credit_lots (account_id, entry_id, category, amount, remaining, created_at)
            VALUES (e.account_id, e.id, 'paid', rest - cancelled, rest - cancelled, e.created_at);
        END IF;
        -- A refilled lot that is closed or past its expiry keeps what it got back out of reach (closed),
        -- until ledger_append posts its expiry right after this statement.
        UPDATE credit_lots l
        SET closed_at = coalesce(l.closed_at, e.created_at)
        FROM lot_refills f
        WHERE f.account_id = e.account_id AND f.entry_id = e.id
          AND l.account_id = e.account_id AND l.id = f.lot_id
          AND l.remaining > 0
          AND (l.closed_at IS NOT NULL OR l.expires_at <= e.created_at);
        PERFORM lots_repay(e.account_id);

    ELSE
        -- topup, grant, or a positive adjustment: a new lot, on the entry's terms, which repays any debt first.
        INSERT INTO credit_lots (account_id, entry_id, category, priority, amount, remaining, expires_at, created_at)
        VALUES (e.account_id, e.id,
                coalesce(e.lot_category, CASE WHEN e.kind = 'topup' THEN 'paid' ELSE 'promotional' END),
                coalesce(e.lot_priority, 50), e.amount, e.amount, e.lot_expires_at, e.created_at);
        PERFORM lots_repay(e.account_id);
    END CASE;
END;
$$;

COMMENT ON FUNCTION lots_apply_entry(ledger) IS
    'One entry''s lot work, under its account''s lock: a credit makes its lot on the entry''s terms (and repays '
    'debt), a debit draws in draw order (a refund or dispute its payment''s lot first), a restore refills what '
    'its reversal drew (closing a refilled lot that is closed or past its expiry), an expiry or void entry takes '
    'and closes its lot.';

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
               coalesce(n.lot_category, CASE WHEN n.kind = 'topup' THEN 'paid' ELSE 'promotional' END),
               coalesce(n.lot_priority, 50), n.amount, n.amount, n.lot_expires_at, n.created_at
        FROM new_entries n
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
    'After each INSERT statement on the ledger (after ledger_chain): credits make lots on their terms (and '
    'repay debt), debits draw lots in draw order, refunds and disputes their payment''s lot first, restores '
    'refill what their reversal drew, expiry and void entries take and close their lot. Plain debits only: '
    'one set-based allocation for the whole statement; plain credits on accounts without debt: one insert '
    'of their lots.';

CREATE FUNCTION ledger_append(
    p_account_ids     text[],
    p_kinds           text[],
    p_amounts         bigint[],
    p_descriptions    text[],
    p_dedupe_keys     text[],
    p_payment_intents text[]     DEFAULT NULL,
    p_no_overdraw     boolean[]  DEFAULT NULL,
    p_lot_ids         bigint[]   DEFAULT NULL,
    p_reverses        text[]     DEFAULT NULL,
    p_lot_categories  text[]     DEFAULT NULL,
    p_lot_priorities  smallint[] DEFAULT NULL,
    p_lot_expires_at  text[]     DEFAULT NULL,
    p_lot_ttls        float8[]   DEFAULT NULL,
    p_balance         bigint     DEFAULT NULL,
    p_subjects        text[]     DEFAULT NULL,
    p_features        text[]     DEFAULT NULL
)
    RETURNS TABLE (
        k bigint, id bigint, account_id text, kind text, amount bigint, description text, dedupe_key text,
        payment_intent text, seq bigint, balance_after bigint, created_at timestamptz, lot_id bigint,
        reverses_entry_id bigint, subject text, feature text
    )
    LANGUAGE plpgsql AS
$fn$
DECLARE
    locked_ids      text[];
    locked_seqs     bigint[];
    locked_balances bigint[];
    taken           text[];
    reversal_keys   text[];
    reversal_ids    bigint[];
    a_k             bigint[];
    a_accounts      text[];
    a_seqs          bigint[];
    a_balances      bigint[];
    a_keys          text[];
    claimed         text[];
    all_claimed     boolean;
    accounts        text[];
    batch           text[];
BEGIN
    -- 1. Lock the plan's accounts, in id order (with p_balance, only if the balance is still that).
    SELECT coalesce(array_agg(a.id ORDER BY a.id), '{}'), coalesce(array_agg(a.last_seq ORDER BY a.id), '{}'),
           coalesce(array_agg(a.balance ORDER BY a.id), '{}')
    INTO locked_ids, locked_seqs, locked_balances
    FROM accounts_lock(p_account_ids, p_balance) AS a;
    IF cardinality(locked_ids) = 0 THEN
        RETURN;
    END IF;

    -- 2. Under the locks: the keys entries hold already, and the reversals restores undo (read on their
    -- own, so that on Citus each is one distributed statement).
    taken := ARRAY(
        SELECT t FROM ledger_keys_taken(ARRAY(
            SELECT DISTINCT nullif(x, '') FROM unnest(p_dedupe_keys) AS x WHERE nullif(x, '') IS NOT NULL
        )) AS t
    );
    IF EXISTS (SELECT 1 FROM unnest(p_reverses) AS x WHERE nullif(x, '') IS NOT NULL) THEN
        SELECT coalesce(array_agg(r.dedupe_key), '{}'), coalesce(array_agg(r.id), '{}')
        INTO reversal_keys, reversal_ids
        FROM ledger r
        JOIN unnest(p_account_ids, p_reverses) AS x (account_id, key)
            ON r.account_id = x.account_id AND r.dedupe_key = x.key
        WHERE r.dedupe_key = ANY(p_reverses);
    END IF;

    -- 3. The plan: a row is inserted when its account is locked, its key (if any) is neither taken nor
    -- held by an earlier row of the plan, and no row of its account flagged no_overdraw would leave the
    -- balance below zero. Each account's rows are numbered from its last_seq in plan order, each with
    -- balance_after = balance + the running sum (a numeric: a balance beyond a bigint fails the cast,
    -- numeric_value_out_of_range, and with it the whole call).
    WITH plan AS (
        SELECT p.k, p.account_id, p.amount, nullif(p.dedupe_key, '') AS dedupe_key, coalesce(p.no_overdraw, false) AS no_overdraw,
               row_number() OVER (PARTITION BY nullif(p.dedupe_key, '') ORDER BY p.k) AS nth
        FROM unnest(p_account_ids, p_amounts, p_dedupe_keys, p_no_overdraw)
            WITH ORDINALITY AS p (account_id, amount, dedupe_key, no_overdraw, k)
    ), chained AS (
        SELECT p.k, p.account_id, p.dedupe_key, p.no_overdraw,
               a.last_seq + row_number() OVER w AS seq,
               a.balance + sum(p.amount::numeric) OVER w AS balance_after
        FROM plan p
        JOIN unnest(locked_ids, locked_seqs, locked_balances) AS a (id, last_seq, balance) ON a.id = p.account_id
        WHERE p.dedupe_key IS NULL OR (p.nth = 1 AND NOT p.dedupe_key = ANY(taken))
        WINDOW w AS (PARTITION BY p.account_id ORDER BY p.k ROWS UNBOUNDED PRECEDING)
    ), judged AS (
        -- A window, not NOT EXISTS over chained: from a session's sixth call plpgsql plans this statement
        -- generically, taking the arrays for a few rows, and the anti join became a nested loop, n * n for
        -- a billing chunk of n decisions.
        SELECT c.*, bool_or(c.no_overdraw AND c.balance_after < 0) OVER (PARTITION BY c.account_id) AS overdrawn
        FROM chained c
    )
    SELECT coalesce(array_agg(c.k ORDER BY c.account_id, c.seq), '{}'),
           coalesce(array_agg(c.account_id ORDER BY c.account_id, c.seq), '{}'),
           coalesce(array_agg(c.seq ORDER BY c.account_id, c.seq), '{}'),
           coalesce(array_agg(c.balance_after::bigint ORDER BY c.account_id, c.seq), '{}'),
           coalesce(array_agg(c.dedupe_key ORDER BY c.account_id, c.seq), '{}')
    INTO a_k, a_accounts, a_seqs, a_balances, a_keys
    FROM judged c
    WHERE NOT c.overdrawn;
    IF cardinality(a_k) = 0 THEN
        RETURN;
    END IF;

    -- 4. Claim the keys of the rows to insert (on Citus; on plain PostgreSQL the insert is checked by
    -- ledger_dedupe_idx). A key not claimed (a concurrent posting claimed it first) is not inserted.
    claimed := ARRAY(
        SELECT claim_keys(
            ARRAY(SELECT x FROM unnest(a_keys) AS x WHERE x IS NOT NULL),
            ARRAY(SELECT x.account_id FROM unnest(a_keys, a_accounts) AS x (key, account_id) WHERE x.key IS NOT NULL)
        )
    );
    -- Every key claimed (always on plain PostgreSQL): no row needs its key looked up in claimed.
    all_claimed := cardinality(claimed) = (SELECT count(*) FROM unnest(a_keys) AS x WHERE x IS NOT NULL);
    accounts := ARRAY(SELECT DISTINCT x FROM unnest(a_accounts) AS x ORDER BY x);

    -- 5. Insert, in each account's seq order, a batch of accounts at a time (ledger_batches: all at once on
    -- plain PostgreSQL). ON CONFLICT DO NOTHING: a key inserted meanwhile by a
    -- transaction this one waited for is skipped; if it was not its account's last row, the hole it leaves
    -- fails the statement in ledger_chain, so no wrong chain is ever left. (No arbiter is named: the key's
    -- index is ledger_dedupe_idx here and per account on Citus; the other unique keys, the id and
    -- (account_id, seq) under the account lock, cannot conflict, and a row they skipped would be missing
    -- from the answer and break the chain the same way.) created_at is taken per row under the lock, and a
    -- lot lifetime runs from it.
    FOR batch IN SELECT b FROM ledger_batches(accounts) AS b LOOP
    RETURN QUERY
    WITH planned AS (
        SELECT r.k, r.account_id, r.seq, r.balance_after, r.dedupe_key, clock_timestamp() AS at
        FROM unnest(a_k, a_accounts, a_seqs, a_balances, a_keys) AS r (k, account_id, seq, balance_after, dedupe_key)
        -- all_claimed and a batch of every account first: OR stops at them, and = ANY, a linear search
        -- of the array per row, runs only for the rows it must decide.
        WHERE (all_claimed OR r.dedupe_key IS NULL OR r.dedupe_key = ANY(claimed))
          AND (cardinality(batch) = cardinality(accounts) OR r.account_id = ANY(batch))
        ORDER BY r.account_id, r.seq
    ), inserted AS (
        INSERT INTO ledger AS l (account_id, kind, amount, description, dedupe_key, payment_intent, seq, balance_after,
                                 created_at, lot_id, reverses_entry_id, lot_category, lot_priority, lot_expires_at,
                                 subject, feature)
        SELECT r.account_id, p_kinds[r.k], p_amounts[r.k], coalesce(p_descriptions[r.k], ''), r.dedupe_key,
               nullif(p_payment_intents[r.k], ''), r.seq, r.balance_after, r.at, nullif(p_lot_ids[r.k], 0),
               reversal_ids[array_position(reversal_keys, nullif(p_reverses[r.k], ''))],
               -- Lot terms: a credit's only.
               CASE WHEN p_amounts[r.k] > 0 THEN nullif(p_lot_categories[r.k], '') END,
               CASE WHEN p_amounts[r.k] > 0 THEN p_lot_priorities[r.k] END,
               CASE WHEN p_amounts[r.k] > 0 THEN
                   coalesce(nullif(p_lot_expires_at[r.k], '')::timestamptz,
                            r.at + make_interval(secs => nullif(p_lot_ttls[r.k], 0)))
               END,
               nullif(p_subjects[r.k], ''), nullif(p_features[r.k], '')
        FROM planned r
        ORDER BY r.account_id, r.seq
        ON CONFLICT DO NOTHING
        RETURNING l.id, l.account_id, l.kind, l.amount, l.description, l.dedupe_key, l.payment_intent, l.seq,
                  l.balance_after, l.created_at, l.lot_id, l.reverses_entry_id, l.subject, l.feature
    )
    SELECT r.k, i.id, i.account_id, i.kind, i.amount, i.description, i.dedupe_key, i.payment_intent, i.seq,
           i.balance_after, i.created_at, i.lot_id, i.reverses_entry_id, i.subject, i.feature
    FROM inserted i
    JOIN planned r ON r.account_id = i.account_id AND r.seq = i.seq
    ORDER BY i.account_id, i.seq;
    END LOOP;

    -- 6. A restore that refilled a lot that is closed or past its expiry (ledger_lots closed it): that
    -- credit goes at once, as an expiry, or as a void when the lot was closed before its time. Posted
    -- through this same road, keyed by lot and restore, and returned with k NULL.
    IF 'refund_restore' = ANY(p_kinds) OR 'dispute_won' = ANY(p_kinds) THEN
        RETURN QUERY
        SELECT NULL::bigint, g.id, g.account_id, g.kind, g.amount, g.description, g.dedupe_key, g.payment_intent,
               g.seq, g.balance_after, g.created_at, g.lot_id, g.reverses_entry_id, g.subject, g.feature
        FROM (
            SELECT array_agg(x.account_id ORDER BY x.account_id, x.seq, x.lot) AS accounts,
                   array_agg(x.kind ORDER BY x.account_id, x.seq, x.lot) AS kinds,
                   array_agg(-x.remaining ORDER BY x.account_id, x.seq, x.lot) AS amounts,
                   array_agg(x.kind || ' of lot ' || x.lot || ' refilled by entry ' || x.entry
                             ORDER BY x.account_id, x.seq, x.lot) AS descriptions,
                   array_agg(CASE x.kind WHEN 'expiry' THEN 'expire:' ELSE 'void:' END || x.lot || ':' || x.entry
                             ORDER BY x.account_id, x.seq, x.lot) AS keys,
                   array_agg(x.lot ORDER BY x.account_id, x.seq, x.lot) AS lots
            FROM (
                SELECT e.account_id, e.seq, e.id AS entry, l.id AS lot, l.remaining,
                       CASE WHEN l.expires_at <= e.created_at THEN 'expiry' ELSE 'void' END AS kind
                FROM ledger e
                JOIN lot_refills f ON f.account_id = e.account_id AND f.entry_id = e.id
                JOIN credit_lots l ON l.account_id = f.account_id AND l.id = f.lot_id
                JOIN unnest(a_accounts, a_seqs) AS n (account_id, seq) ON n.account_id = e.account_id AND n.seq = e.seq
                WHERE e.account_id = ANY(a_accounts)
                  AND e.kind IN ('refund_restore', 'dispute_won')
                  AND l.closed_at IS NOT NULL AND l.remaining > 0
            ) x
            HAVING count(*) > 0
        ) gone
        CROSS JOIN LATERAL ledger_append(gone.accounts, gone.kinds, gone.amounts, gone.descriptions, gone.keys,
                                         p_lot_ids => gone.lots) AS g;
    END IF;
END;
$fn$;

COMMENT ON FUNCTION ledger_append(text[], text[], bigint[], text[], text[], text[], boolean[], bigint[], text[], text[], smallint[], text[], float8[], bigint, text[], text[]) IS
    'The one road into the ledger: inserts planned entries (arrays in lockstep) after locking their accounts '
    'in id order, numbering each account''s rows from last_seq with balance_after from the locked balance, '
    'leaving out rows whose key is taken and the rows of an account whose no-overdraw row would go below zero, '
    'then posts the at-once expiry of any lot a restore refilled after it closed. Stores on each entry the '
    'subject and feature of the hold or decision it is posted for. Returns each inserted entry with the '
    'position (k) of its planned row; an entry it posted on its own (that expiry) has k NULL.';

DROP TABLE revenue_recognitions;
DROP FUNCTION revenue_recognitions_refuse_change();

ALTER TABLE credit_lots
    DROP COLUMN cost_amount,
    DROP COLUMN cost_currency;

ALTER TABLE ledger
    DROP COLUMN lot_cost_amount,
    DROP COLUMN lot_cost_currency;

DROP TRIGGER topups_credits_default ON topups;
DROP FUNCTION topups_credits_default();
ALTER TABLE topups DROP COLUMN credits;
COMMENT ON COLUMN topups.amount IS NULL;

ALTER TABLE accounts DROP CONSTRAINT accounts_recharge_unit_check;
ALTER TABLE accounts DROP COLUMN unit;
