-- topups_pay: the statement that pays orders (TopupsPay), as a function, so that its Citus form
-- (sql/citus) runs it as a few statements of literal VALUES that Citus routes to the shards of their
-- rows, instead of one statement whose CTEs it runs as distributed subplans through the coordinator.
--
-- The one statement that pays orders (every path: the webhook's general path and its happy path, a
-- group of Checkout Sessions, a recharge), at most once per order; the arrays are read in lockstep, one
-- element per order, each order, session and payment at most once ('' for none). An order is named by its
-- Checkout Session, or, with no session, by its id (a recharge attempt's order), under its account. Its
-- pending -> paid transition is conditional: only the transaction whose UPDATE finds it pending, of this
-- amount and currency, gets it back, and only that transaction posts the credit. A session without an
-- order yet (one not created through the API) has its order recorded already paid, on its account when
-- that account has the session's currency (money is never converted); under topups_session_id_key, a
-- session with an order already, or recorded meanwhile by a concurrent transaction (waited for), records
-- nothing. Returns one row per order this statement made paid. An order without a row was paid or
-- expired before, holds another amount or currency, or its account does not exist or has another
-- currency. Fails as a whole with topups_payment_intent_key when a payment already paid another order.
-- On Citus, where both keys are per account, sessions and payments are also claimed across accounts
-- (sessions:{id} with claim_keys: a session another account holds records nothing, as its key does
-- here; payments:{id} with claim_unique: a payment another account's order holds fails the statement
-- with topups_payment_intent_key, as its key does here).
-- Returns the orders it made paid, as rows of topups.
CREATE FUNCTION topups_pay(p_ids text[], p_account_ids text[], p_session_ids text[], p_payment_intents text[], p_paid_event_ids text[], p_amounts bigint[], p_currencies text[]) RETURNS SETOF topups
    -- PL/pgSQL, whose plan each session keeps (a SQL function that writes is planned at every call).
    LANGUAGE plpgsql
    AS $$
BEGIN
    RETURN QUERY
    WITH pay AS (
        SELECT p_ids[i] AS id, p_account_ids[i] AS account_id,
               nullif(p_session_ids[i], '') AS session_id, nullif(p_payment_intents[i], '') AS payment_intent,
               p_paid_event_ids[i] AS paid_event_id, p_amounts[i] AS amount,
               p_currencies[i] AS currency
        FROM generate_subscripts(p_ids, 1) AS i
    ), paid_by_session AS (
        UPDATE topups t
        SET status = 'paid', payment_intent = s.payment_intent, paid_event_id = s.paid_event_id, paid_at = now()
        FROM pay s
        WHERE t.session_id = s.session_id
          -- = ANY on topups_session_id_key: an index scan, whatever the planner guesses of the arrays.
          AND t.session_id = ANY(p_session_ids)
          AND t.account_id = s.account_id
          -- = ANY on the distribution column: on Citus, a router UPDATE on the accounts' shards, not one
          -- over every shard (which Citus serialises against every other multi-shard write).
          AND t.account_id = ANY(p_account_ids)
          AND t.status = 'pending'
          AND t.amount = s.amount
          AND lower(t.currency) = lower(s.currency)
        RETURNING t.id, t.account_id, t.session_id, t.payment_intent, t.amount, t.currency, t.status, t.checkout_url,
                  t.paid_event_id, t.created_at, t.paid_at, t.idempotency_key, t.request_fingerprint, t.credits
    ), paid_by_id AS (
        UPDATE topups t
        SET status = 'paid', payment_intent = s.payment_intent, paid_event_id = s.paid_event_id, paid_at = now()
        FROM pay s
        WHERE s.session_id IS NULL
          AND t.id = s.id
          AND t.id = ANY(p_ids)
          AND t.account_id = s.account_id
          AND t.account_id = ANY(p_account_ids)
          AND t.status = 'pending'
          AND t.amount = s.amount
          AND lower(t.currency) = lower(s.currency)
        RETURNING t.id, t.account_id, t.session_id, t.payment_intent, t.amount, t.currency, t.status, t.checkout_url,
                  t.paid_event_id, t.created_at, t.paid_at, t.idempotency_key, t.request_fingerprint, t.credits
    ), to_record AS (
        SELECT s.id, a.id AS account_id, s.session_id, s.amount, a.currency, s.payment_intent, s.paid_event_id
        FROM pay s
        JOIN accounts a ON a.id = s.account_id AND lower(a.currency) = lower(s.currency)
        WHERE s.session_id IS NOT NULL
          AND a.id = ANY(p_account_ids)
    ), sessions_claimed AS (
        SELECT c.key
        FROM claim_keys(ARRAY(SELECT 'sessions:' || r.session_id FROM to_record r), ARRAY(SELECT r.account_id FROM to_record r)) AS c (key)
    ), recorded_paid AS (
        INSERT INTO topups (id, account_id, session_id, amount, credits, currency, status, payment_intent, paid_event_id, paid_at)
        SELECT r.id, r.account_id, r.session_id, r.amount, r.amount, r.currency, 'paid', r.payment_intent, r.paid_event_id, now()
        FROM to_record r
        WHERE 'sessions:' || r.session_id IN (SELECT key FROM sessions_claimed)
        -- The session's key alone: a payment that paid another order still fails the statement.
        ON CONFLICT ON CONSTRAINT topups_session_id_key DO NOTHING
        RETURNING id, account_id, session_id, payment_intent, amount, currency, status, checkout_url, paid_event_id,
                  created_at, paid_at, idempotency_key, request_fingerprint, credits
    ), paid AS (
        SELECT * FROM paid_by_session
        UNION ALL
        SELECT * FROM paid_by_id
        UNION ALL
        SELECT * FROM recorded_paid
    ), payments_claimed AS (
        SELECT claim_unique(ARRAY(SELECT 'payments:' || p.payment_intent FROM paid p WHERE p.payment_intent IS NOT NULL),
                            ARRAY(SELECT p.account_id FROM paid p WHERE p.payment_intent IS NOT NULL),
                            'topups', 'topups_payment_intent_key')
    )
    SELECT p.id, p.account_id, p.session_id, p.payment_intent, p.amount, p.currency, p.status, p.checkout_url,
           p.paid_event_id, p.created_at, p.paid_at, p.idempotency_key, p.request_fingerprint, p.credits
    FROM paid p, payments_claimed;
END;
$$;

COMMENT ON FUNCTION topups_pay(text[], text[], text[], text[], text[], bigint[], text[]) IS 'Pays orders (arrays in lockstep, one element per order, each order, session and payment at most once): a pending order named by its session, or with no session by its id, of this amount and currency, becomes paid; a session without an order has its order recorded paid on its account when the currencies match (topups_session_id_key: at most once). Returns the orders it made paid; fails as a whole with topups_payment_intent_key when a payment already paid another order.';
