-- name: TopupsInsertPending :one
-- Records a new pending order before its Checkout Session is created (the API), with the caller's
-- Idempotency-Key and request fingerprint when one was sent. Returns no row when the account already
-- has an order under that key (topups_idempotency_key; a concurrent insert of the same key waits for
-- the first and then returns none). Fails with topups_account_fk when the account does not exist.
INSERT INTO topups (id, account_id, amount, currency, idempotency_key, request_fingerprint)
VALUES (@id, @account_id, @amount, @currency, sqlc.narg(idempotency_key), sqlc.narg(request_fingerprint))
ON CONFLICT (account_id, idempotency_key) DO NOTHING
RETURNING id, account_id, session_id, payment_intent, amount, currency, status, checkout_url, paid_event_id, created_at, paid_at,
          idempotency_key, request_fingerprint;

-- name: TopupsGetByIdempotencyKey :one
-- The order the account created under an Idempotency-Key, with its request fingerprint. Returns no row
-- when there is none.
SELECT id, account_id, session_id, payment_intent, amount, currency, status, checkout_url, paid_event_id, created_at, paid_at,
       idempotency_key, request_fingerprint
FROM topups
WHERE account_id = @account_id
  AND idempotency_key = @idempotency_key::text;

-- name: TopupsSetSession :one
-- Attaches the Checkout Session created for a pending order; attaching the same session again (a
-- retried request, answered the same session by Stripe's idempotency) changes nothing. Returns no row
-- when the order does not exist or already has another session.
UPDATE topups
SET session_id = @session_id, checkout_url = @checkout_url
WHERE id = @id
  AND (session_id IS NULL OR session_id = @session_id)
RETURNING id, account_id, session_id, payment_intent, amount, currency, status, checkout_url, paid_event_id, created_at, paid_at,
          idempotency_key, request_fingerprint;

-- name: TopupsInsertForSession :exec
-- Records the order of a Checkout Session the webhook learns about first (a session not created
-- through the API). Does nothing when the session already has an order (topups_session_id_key).
INSERT INTO topups (id, account_id, session_id, amount, currency)
VALUES (@id, @account_id, @session_id, @amount, @currency)
ON CONFLICT (session_id) DO NOTHING;

-- name: TopupsMarkPaid :one
-- The pending -> paid transition, at most once per order: only the transaction whose UPDATE finds the
-- order still pending gets a row back, and only that transaction posts the credit. Returns no row when
-- the session has no order or it was already paid. Fails with topups_payment_intent_key when the
-- payment already paid another order.
UPDATE topups
SET status = 'paid', payment_intent = sqlc.narg(payment_intent), paid_event_id = @paid_event_id, paid_at = now()
WHERE session_id = @session_id
  AND status = 'pending'
RETURNING id, account_id, session_id, payment_intent, amount, currency, status, checkout_url, paid_event_id, created_at, paid_at,
          idempotency_key, request_fingerprint;

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
       idempotency_key, request_fingerprint
FROM topups
WHERE id = @id;

-- name: TopupsGetBySession :one
-- Returns no row when the session has no order.
SELECT id, account_id, session_id, payment_intent, amount, currency, status, checkout_url, paid_event_id, created_at, paid_at,
       idempotency_key, request_fingerprint
FROM topups
WHERE session_id = @session_id;

-- name: TopupsGetByPaymentIntent :one
-- The paid order of a payment: how refunds and disputes, whose own metadata is empty, find their
-- account. Returns no row when the payment is not (yet) recorded.
SELECT id, account_id, session_id, payment_intent, amount, currency, status, checkout_url, paid_event_id, created_at, paid_at,
       idempotency_key, request_fingerprint
FROM topups
WHERE payment_intent = @payment_intent::text;

-- name: TopupsMarkPaidByID :one
-- The pending -> paid transition of an order paid without a Checkout Session (a recharge attempt's,
-- by payment_intent.succeeded), the same guard as TopupsMarkPaid: only the transaction whose UPDATE
-- finds it pending gets a row and posts the credit.
UPDATE topups
SET status = 'paid', payment_intent = @payment_intent, paid_event_id = @paid_event_id, paid_at = now()
WHERE id = @id
  AND status = 'pending'
RETURNING id, account_id, session_id, payment_intent, amount, currency, status, checkout_url, paid_event_id, created_at, paid_at,
          idempotency_key, request_fingerprint;
