-- ledger_insert: the one statement that inserts entries, ledger_append's last step on its own. ledger_append
-- still decides everything (locks, keys, seq, balance_after, the no-overdraw rule) and hands it the rows
-- to insert; a function, so that its Citus form (sql/citus) writes them as literal VALUES, which Citus
-- sends to each shard as a statement of its own, instead of an INSERT ... SELECT from the arrays through
-- the coordinator, one shard at a time. ledger_batches, which ledger_append inserted by, goes: on
-- plain PostgreSQL it was one batch of every account, and the batching by shard is the Citus form's.
--
-- The first five arrays are the rows to insert, in lockstep and in account and seq order: each row's
-- position k in ledger_append's plan, account, seq, balance_after and dedupe key (NULL: none). The others
-- are the plan's, read at each row's k, as ledger_append took them (the entry a restore undoes resolved
-- to its id, p_reverses_entry_ids). created_at is taken per row, here, under ledger_append's locks.
CREATE FUNCTION ledger_insert(p_k bigint[], p_account_ids text[], p_seqs bigint[], p_balances_after bigint[], p_dedupe_keys text[], p_kinds text[], p_amounts bigint[], p_descriptions text[], p_payment_intents text[], p_lot_ids bigint[], p_reverses_entry_ids bigint[], p_lot_categories text[], p_lot_priorities smallint[], p_lot_expires_at text[], p_lot_ttls double precision[], p_subjects text[], p_features text[], p_lot_cost_amounts bigint[], p_lot_cost_currencies text[], p_on_behalf_of text[]) RETURNS TABLE(k bigint, id bigint, account_id text, kind text, amount bigint, description text, dedupe_key text, payment_intent text, seq bigint, balance_after bigint, created_at timestamptz, lot_id bigint, reverses_entry_id bigint, subject text, feature text, on_behalf_of text)
    -- PL/pgSQL, whose plan each session keeps (a SQL function that writes is planned at every call).
    LANGUAGE plpgsql
    AS $$
BEGIN
    RETURN QUERY
    WITH planned AS (
        SELECT r.k, r.account_id, r.seq, r.balance_after, r.dedupe_key, clock_timestamp() AS at
        FROM unnest(p_k, p_account_ids, p_seqs, p_balances_after, p_dedupe_keys)
            AS r (k, account_id, seq, balance_after, dedupe_key)
        ORDER BY r.account_id, r.seq
    ), inserted AS (
        INSERT INTO ledger AS l (account_id, kind, amount, description, dedupe_key, payment_intent, seq, balance_after,
                                 created_at, lot_id, reverses_entry_id, lot_category, lot_priority, lot_expires_at,
                                 subject, feature, lot_cost_amount, lot_cost_currency, on_behalf_of)
        SELECT r.account_id, p_kinds[r.k], p_amounts[r.k], coalesce(p_descriptions[r.k], ''), r.dedupe_key,
               nullif(p_payment_intents[r.k], ''), r.seq, r.balance_after, r.at, nullif(p_lot_ids[r.k], 0),
               p_reverses_entry_ids[r.k],
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
               CASE WHEN p_amounts[r.k] > 0 THEN nullif(p_lot_cost_currencies[r.k], '') END,
               nullif(p_on_behalf_of[r.k], '')
        FROM planned r
        ORDER BY r.account_id, r.seq
        ON CONFLICT DO NOTHING
        RETURNING l.id, l.account_id, l.kind, l.amount, l.description, l.dedupe_key, l.payment_intent, l.seq,
                  l.balance_after, l.created_at, l.lot_id, l.reverses_entry_id, l.subject, l.feature, l.on_behalf_of
    )
    SELECT r.k, i.id, i.account_id, i.kind, i.amount, i.description, i.dedupe_key, i.payment_intent, i.seq,
           i.balance_after, i.created_at, i.lot_id, i.reverses_entry_id, i.subject, i.feature, i.on_behalf_of
    FROM inserted i
    JOIN planned r ON r.account_id = i.account_id AND r.seq = i.seq
    ORDER BY i.account_id, i.seq;
END;
$$;

COMMENT ON FUNCTION ledger_insert(bigint[], text[], bigint[], bigint[], text[], text[], bigint[], text[], text[], bigint[], bigint[], text[], smallint[], text[], double precision[], text[], text[], bigint[], text[], text[]) IS 'Inserts the entries ledger_append planned and decided (the rows in lockstep, in account and seq order; the plan''s arrays read at each row''s position k), with created_at taken per row, skipping a row whose key was inserted meanwhile (ON CONFLICT DO NOTHING); returns each inserted entry with its k. Called only by ledger_append.';

-- ledger_append as 000031_baseline made it, but for its last step, which hands the rows to insert to
-- ledger_insert. What it calls that sql/citus gives a Citus form of is now accounts_lock, ledger_keys_taken,
-- claim_keys and ledger_insert.
CREATE OR REPLACE FUNCTION ledger_append(p_account_ids text[], p_kinds text[], p_amounts bigint[], p_descriptions text[], p_dedupe_keys text[], p_payment_intents text[] DEFAULT NULL::text[], p_no_overdraw boolean[] DEFAULT NULL::boolean[], p_lot_ids bigint[] DEFAULT NULL::bigint[], p_reverses text[] DEFAULT NULL::text[], p_lot_categories text[] DEFAULT NULL::text[], p_lot_priorities smallint[] DEFAULT NULL::smallint[], p_lot_expires_at text[] DEFAULT NULL::text[], p_lot_ttls double precision[] DEFAULT NULL::double precision[], p_balance bigint DEFAULT NULL::bigint, p_subjects text[] DEFAULT NULL::text[], p_features text[] DEFAULT NULL::text[], p_lot_cost_amounts bigint[] DEFAULT NULL::bigint[], p_lot_cost_currencies text[] DEFAULT NULL::text[], p_on_behalf_of text[] DEFAULT NULL::text[]) RETURNS TABLE(k bigint, id bigint, account_id text, kind text, amount bigint, description text, dedupe_key text, payment_intent text, seq bigint, balance_after bigint, created_at timestamptz, lot_id bigint, reverses_entry_id bigint, subject text, feature text, on_behalf_of text)
    LANGUAGE plpgsql
    AS $$
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
    reversed        bigint[];
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
        -- Each planned row's: the entry its restore undoes (NULL: none, or not found).
        reversed := ARRAY(
            SELECT reversal_ids[array_position(reversal_keys, nullif(x.key, ''))]
            FROM unnest(p_reverses) WITH ORDINALITY AS x (key, n)
            ORDER BY x.n
        );
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

    -- 5. Insert the rows whose keys are claimed, in each account's seq order (ledger_insert). ON CONFLICT
    -- DO NOTHING: a key inserted meanwhile by a transaction this one waited for is skipped; if it was not
    -- its account's last row, the hole it leaves fails the statement in ledger_chain, so no wrong chain is
    -- ever left. (No arbiter is named: the key's index is ledger_dedupe_idx here and per account on Citus;
    -- the other unique keys, the id and (account_id, seq) under the account lock, cannot conflict, and a
    -- row they skipped would be missing from the answer and break the chain the same way.) created_at is
    -- taken per row under the lock, and a lot lifetime runs from it.
    IF NOT all_claimed THEN
        SELECT coalesce(array_agg(r.k ORDER BY r.account_id, r.seq), '{}'),
               coalesce(array_agg(r.account_id ORDER BY r.account_id, r.seq), '{}'),
               coalesce(array_agg(r.seq ORDER BY r.account_id, r.seq), '{}'),
               coalesce(array_agg(r.balance_after ORDER BY r.account_id, r.seq), '{}'),
               coalesce(array_agg(r.dedupe_key ORDER BY r.account_id, r.seq), '{}')
        INTO a_k, a_accounts, a_seqs, a_balances, a_keys
        FROM unnest(a_k, a_accounts, a_seqs, a_balances, a_keys) AS r (k, account_id, seq, balance_after, dedupe_key)
        WHERE r.dedupe_key IS NULL OR r.dedupe_key = ANY(claimed);
    END IF;
    RETURN QUERY
    SELECT * FROM ledger_insert(a_k, a_accounts, a_seqs, a_balances, a_keys, p_kinds, p_amounts, p_descriptions,
                                p_payment_intents, p_lot_ids, reversed, p_lot_categories, p_lot_priorities,
                                p_lot_expires_at, p_lot_ttls, p_subjects, p_features, p_lot_cost_amounts,
                                p_lot_cost_currencies, p_on_behalf_of);

    -- 6. A restore that refilled a lot that is closed or past its expiry (ledger_lots closed it): that
    -- credit goes at once, as an expiry, or as a void when the lot was closed before its time. Posted
    -- through this same road, keyed by lot and restore, and returned with k NULL.
    IF 'refund_restore' = ANY(p_kinds) OR 'dispute_won' = ANY(p_kinds) THEN
        RETURN QUERY
        SELECT NULL::bigint, g.id, g.account_id, g.kind, g.amount, g.description, g.dedupe_key, g.payment_intent,
               g.seq, g.balance_after, g.created_at, g.lot_id, g.reverses_entry_id, g.subject, g.feature,
               g.on_behalf_of
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
$$;

COMMENT ON FUNCTION ledger_append(p_account_ids text[], p_kinds text[], p_amounts bigint[], p_descriptions text[], p_dedupe_keys text[], p_payment_intents text[], p_no_overdraw boolean[], p_lot_ids bigint[], p_reverses text[], p_lot_categories text[], p_lot_priorities smallint[], p_lot_expires_at text[], p_lot_ttls double precision[], p_balance bigint, p_subjects text[], p_features text[], p_lot_cost_amounts bigint[], p_lot_cost_currencies text[], p_on_behalf_of text[]) IS 'The one road into the ledger: inserts planned entries (arrays in lockstep) after locking their accounts in id order, numbering each account''s rows from last_seq with balance_after from the locked balance, leaving out rows whose key is taken and the rows of an account whose no-overdraw row would go below zero, then posts the at-once expiry of any lot a restore refilled after it closed. Stores on each entry the subject and feature of the hold or decision it is posted for, on a credit what its lot cost, and on a pool''s entry the member it paid for (on_behalf_of). Returns each inserted entry with the position (k) of its planned row; an entry it posted on its own (that expiry) has k NULL.';

DROP FUNCTION ledger_batches(p_account_ids text[]);
