-- name: TopupsInsertPending :one
-- Records a new pending order before its Checkout Session is created (the API), with the caller's
-- Idempotency-Key and request fingerprint when one was sent. Returns no row when the account already
-- has an order under that key (topups_idempotency_key; a concurrent insert of the same key waits for
-- the first and then returns none). Fails with topups_account_fk when the account does not exist.
INSERT INTO topups (id, account_id, amount, credits, currency, idempotency_key, request_fingerprint)
VALUES (@id, @account_id, @amount, @credits, @currency, sqlc.narg(idempotency_key), sqlc.narg(request_fingerprint))
ON CONFLICT (account_id, idempotency_key) DO NOTHING
RETURNING id, account_id, session_id, payment_intent, amount, currency, status, checkout_url, paid_event_id, created_at, paid_at,
          idempotency_key, request_fingerprint, credits;

-- name: TopupsGetByIdempotencyKey :one
-- The order the account created under an Idempotency-Key, with its request fingerprint. Returns no row
-- when there is none.
SELECT id, account_id, session_id, payment_intent, amount, currency, status, checkout_url, paid_event_id, created_at, paid_at,
       idempotency_key, request_fingerprint, credits
FROM topups
WHERE account_id = @account_id
  AND idempotency_key = @idempotency_key::text;

-- name: TopupsSetSession :one
-- Attaches the Checkout Session created for a pending order; attaching the same session again (a
-- retried request, answered the same session by Stripe's idempotency) changes nothing. Returns no row
-- when the order does not exist or already has another session. A session is one order's
-- (topups_session_id_key; on Citus, where that key is per account, the session is also claimed across
-- accounts as sessions:{id}, claim_unique): a session another order holds fails with that key.
WITH target AS (
    SELECT t.account_id
    FROM topups t
    WHERE t.id = @id
      AND (t.session_id IS NULL OR t.session_id = @session_id::text)
), claimed AS (
    -- Called with arrays, not per row of topups: on Citus a function called per row of a distributed table
    -- runs on its shard, where the claim (a distributed statement) cannot.
    SELECT claim_unique(ARRAY(SELECT 'sessions:' || @session_id::text FROM target), ARRAY(SELECT account_id FROM target),
                        'topups', 'topups_session_id_key')
)
UPDATE topups u
SET session_id = @session_id::text, checkout_url = @checkout_url
WHERE u.id = @id
  AND (u.session_id IS NULL OR u.session_id = @session_id::text)
  AND EXISTS (SELECT 1 FROM claimed)
RETURNING u.id, u.account_id, u.session_id, u.payment_intent, u.amount, u.currency, u.status, u.checkout_url, u.paid_event_id,
          u.created_at, u.paid_at, u.idempotency_key, u.request_fingerprint, u.credits;

-- name: TopupsExpire :execrows
-- The pending -> expired transition of a session's order (checkout.session.expired), conditional like
-- the payment: 0 rows when the session has no order or it was already paid or expired.
UPDATE topups
SET status = 'expired'
WHERE session_id = @session_id
  AND status = 'pending';

-- name: TopupsGet :one
-- Returns no row when the order does not exist.
SELECT id, account_id, session_id, payment_intent, amount, currency, status, checkout_url, paid_event_id, created_at, paid_at,
       idempotency_key, request_fingerprint, credits
FROM topups
WHERE id = @id;

-- name: TopupsGetBySession :one
-- Returns no row when the session has no order.
SELECT id, account_id, session_id, payment_intent, amount, currency, status, checkout_url, paid_event_id, created_at, paid_at,
       idempotency_key, request_fingerprint, credits
FROM topups
WHERE session_id = @session_id;

-- name: TopupsGetByPaymentIntent :one
-- The paid order of a payment: how refunds and disputes, whose own metadata is empty, find their
-- account. Returns no row when the payment is not (yet) recorded.
SELECT id, account_id, session_id, payment_intent, amount, currency, status, checkout_url, paid_event_id, created_at, paid_at,
       idempotency_key, request_fingerprint, credits
FROM topups
WHERE payment_intent = @payment_intent::text;

-- name: TopupsPay :many
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
WITH pay AS (
    SELECT (@ids::text[])[i] AS id, (@account_ids::text[])[i] AS account_id,
           nullif((@session_ids::text[])[i], '') AS session_id, nullif((@payment_intents::text[])[i], '') AS payment_intent,
           (@paid_event_ids::text[])[i] AS paid_event_id, (@amounts::bigint[])[i] AS amount,
           (@currencies::text[])[i] AS currency
    FROM generate_subscripts(@ids::text[], 1) AS i
), paid_by_session AS (
    UPDATE topups t
    SET status = 'paid', payment_intent = s.payment_intent, paid_event_id = s.paid_event_id, paid_at = now()
    FROM pay s
    WHERE t.session_id = s.session_id
      -- = ANY on topups_session_id_key: an index scan, whatever the planner guesses of the arrays.
      AND t.session_id = ANY(@session_ids::text[])
      AND t.account_id = s.account_id
      -- = ANY on the distribution column: on Citus, a router UPDATE on the accounts' shards, not one
      -- over every shard (which Citus serialises against every other multi-shard write).
      AND t.account_id = ANY(@account_ids::text[])
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
      AND t.id = ANY(@ids::text[])
      AND t.account_id = s.account_id
      AND t.account_id = ANY(@account_ids::text[])
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
      AND a.id = ANY(@account_ids::text[])
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

-- name: TopupsListForPayments :many
-- The orders of any of the given payments, Checkout Sessions or order ids (topups_payment_intent_key,
-- topups_session_id_key, topups_pkey): what makes a listed Stripe object this deployment's, for the
-- drift pass, and the account it is on. Ids that name no order return nothing.
SELECT id, account_id, session_id, payment_intent, amount, currency, status, checkout_url, paid_event_id, created_at, paid_at,
       idempotency_key, request_fingerprint, credits
FROM topups
WHERE payment_intent = ANY(@payment_intents::text[])
   OR session_id = ANY(@session_ids::text[])
   OR id = ANY(@ids::text[]);
