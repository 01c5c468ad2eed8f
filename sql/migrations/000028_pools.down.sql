-- Accounts lose their pools: every account is a root again.

-- accounts_lock as 000012 made it: id order.
CREATE OR REPLACE FUNCTION accounts_lock(p_ids text[], p_balance bigint DEFAULT NULL)
    RETURNS TABLE (id text, last_seq bigint, balance bigint, held bigint)
    LANGUAGE sql AS
$$
SELECT a.id, a.last_seq, a.balance, a.held
FROM accounts a
WHERE a.id = ANY(p_ids)
  AND (p_balance IS NULL OR a.balance = p_balance)
ORDER BY a.id
FOR NO KEY UPDATE;
$$;

COMMENT ON FUNCTION accounts_lock(text[], bigint) IS
    'Locks the existing accounts among p_ids in id order (FOR NO KEY UPDATE: other entries'' foreign-key '
    'checks stay free) and returns them as locked. With p_balance, only an account whose balance is still '
    'p_balance is locked and returned: after waiting for another transaction''s lock, the balance is checked '
    'again on the row that transaction left. On Citus (sql/citus) one row lock per account, in the same order.';

-- Back to 000024's ledger_append, restored verbatim; entries lose on_behalf_of, and usage its 0.
DROP FUNCTION ledger_append(text[], text[], bigint[], text[], text[], text[], boolean[], bigint[], text[], text[], smallint[], text[], float8[], bigint, text[], text[], bigint[], text[], text[]);
ALTER TABLE ledger DROP COLUMN on_behalf_of;
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
) NOT VALID;
COMMENT ON CONSTRAINT ledger_kind_sign_check ON ledger IS
    'Credits are positive and debits negative, per kind: topup, grant, refund_restore, dispute_won > 0; '
    'usage, refund, dispute, expiry, void < 0; adjustment non-zero. Any other kind is refused.';

-- ledger_append: the one road (000023's, with the cost of a credit's lot). The arrays are one planned row each,
-- read in lockstep (those after the first five may be left out: NULL): the account, kind, amount,
-- description, dedupe key ('' or NULL: none), payment intent ('' or NULL: none), whether the row may not
-- take its account's balance below zero, the lot an expiry or void takes (0 or NULL: none), the key of
-- the reversal a restore undoes ('' or NULL: none), and for a credit (ignored for a debit) the terms of
-- its lot: category ('' or NULL: the default) and priority (NULL: the default), expiry as a timestamp
-- ('' or NULL: none) or else as a lifetime in seconds from the entry's created_at (0 or NULL: never);
-- after p_balance, who spent (subject) and on what (feature): those of the hold or decision the row is
-- posted for ('' or NULL: none); after p_features, what a credit's lot cost: its amount (NULL: 0) and
-- currency ('' or NULL: nothing was paid; the amount is then ignored).
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
    p_features        text[]     DEFAULT NULL,
    p_lot_cost_amounts    bigint[] DEFAULT NULL,
    p_lot_cost_currencies text[]   DEFAULT NULL
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
                                 subject, feature, lot_cost_amount, lot_cost_currency)
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
               nullif(p_subjects[r.k], ''), nullif(p_features[r.k], ''),
               -- A credit's cost: with a currency, or none at all (cost 0).
               CASE WHEN p_amounts[r.k] > 0 AND nullif(p_lot_cost_currencies[r.k], '') IS NOT NULL
                    THEN coalesce(p_lot_cost_amounts[r.k], 0) END,
               CASE WHEN p_amounts[r.k] > 0 THEN nullif(p_lot_cost_currencies[r.k], '') END
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

COMMENT ON FUNCTION ledger_append(text[], text[], bigint[], text[], text[], text[], boolean[], bigint[], text[], text[], smallint[], text[], float8[], bigint, text[], text[], bigint[], text[]) IS
    'The one road into the ledger: inserts planned entries (arrays in lockstep) after locking their accounts '
    'in id order, numbering each account''s rows from last_seq with balance_after from the locked balance, '
    'leaving out rows whose key is taken and the rows of an account whose no-overdraw row would go below zero, '
    'then posts the at-once expiry of any lot a restore refilled after it closed. Stores on each entry the '
    'subject and feature of the hold or decision it is posted for, and on a credit what its lot cost. Returns each inserted entry with the '
    'position (k) of its planned row; an entry it posted on its own (that expiry) has k NULL.';


DROP TRIGGER accounts_parent_tree ON accounts;
DROP FUNCTION accounts_parent_tree();
DROP INDEX accounts_parent_id_idx;
ALTER TABLE accounts
    DROP CONSTRAINT accounts_depth_check,
    DROP CONSTRAINT accounts_parent_not_self_check,
    DROP COLUMN depth,
    DROP COLUMN parent_id;

-- lots_draw as 000024 made it, restored verbatim.
CREATE OR REPLACE FUNCTION lots_draw(p_accounts text[], p_entries bigint[], p_seqs bigint[], p_needs bigint[], p_first_lot bigint,
                          p_repay boolean, p_kinds text[], p_postings bigint[], p_ats timestamptz[])
    RETURNS void
    LANGUAGE sql AS
$$
WITH demand AS (
    SELECT d.account_id, d.entry_id, d.seq, d.need,
           CASE d.kind WHEN 'refund' THEN 'refunded' WHEN 'dispute' THEN 'disputed' ELSE 'recognised' END AS recognition,
           d.posting, d.at,
           sum(d.need) OVER (PARTITION BY d.account_id ORDER BY d.seq ROWS UNBOUNDED PRECEDING) - d.need AS lo
    FROM unnest(p_accounts, p_entries, p_seqs, p_needs, p_kinds, p_postings, p_ats)
        AS d (account_id, entry_id, seq, need, kind, posting, at)
), totals AS (
    SELECT account_id, sum(need) AS total FROM demand GROUP BY account_id
), supply AS MATERIALIZED (
    -- Per account (a lateral: many small in-memory sorts, not one sort of every lot), and only the
    -- lots the demands reach: a chunk of usage rarely gets past the first.
    SELECT t.account_id, s.lot_id, s.remaining, s.lo, s.amount, s.cost_amount, s.cost_currency
    FROM totals t
    CROSS JOIN LATERAL (
        SELECT l.id AS lot_id, l.remaining, l.amount, l.cost_amount, l.cost_currency,
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
           (least(d.lo + d.need, s.lo + s.remaining) - greatest(d.lo, s.lo))::bigint AS amount,
           d.lo AS demand_lo, d.recognition, d.posting, d.at,
           s.amount AS lot_amount, s.amount - s.remaining AS drawn_before, s.cost_amount, s.cost_currency
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
), recognised AS (
    -- Each draw of a priced lot, in the order the demands take the lot: the lot's drawn credits after
    -- it, and the cost that recognised.
    INSERT INTO revenue_recognitions (account_id, lot_id, entry_id, posting_entry_id, kind, credits, drawn_after,
                                      amount, currency, created_at)
    SELECT m.account_id, m.lot_id, m.entry_id, m.posting, m.recognition, m.amount, m.drawn_after,
           (div(m.cost_amount::numeric * m.drawn_after, m.lot_amount)
            - div(m.cost_amount::numeric * (m.drawn_after - m.amount), m.lot_amount))::bigint,
           m.cost_currency, m.at
    FROM (
        SELECT w.*, w.drawn_before + sum(w.amount) OVER (
                   PARTITION BY w.account_id, w.lot_id ORDER BY w.demand_lo ROWS UNBOUNDED PRECEDING) AS drawn_after
        FROM draws w
        WHERE w.cost_amount > 0
    ) m
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
