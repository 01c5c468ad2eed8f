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
-- group of Checkout Sessions, a recharge), at most once per order: topups_pay (sql/migrations), whose
-- comment says what it guarantees. The arrays are read in lockstep, one element per order, each order,
-- session and payment at most once ('' for none). Returns one row per order this statement made paid;
-- fails as a whole with topups_payment_intent_key when a payment already paid another order.
SELECT p.id, p.account_id, p.session_id, p.payment_intent, p.amount, p.currency, p.status, p.checkout_url,
       p.paid_event_id, p.created_at, p.paid_at, p.idempotency_key, p.request_fingerprint, p.credits
FROM topups_pay(@ids::text[], @account_ids::text[], @session_ids::text[], @payment_intents::text[],
                @paid_event_ids::text[], @amounts::bigint[], @currencies::text[]) AS p;

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
