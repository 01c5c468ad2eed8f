-- name: TopupsInsertPending :one
-- Records a new pending order before its Checkout Session is created (the API). Fails with
-- topups_account_fk when the account does not exist.
INSERT INTO topups (id, account_id, amount, currency)
VALUES (@id, @account_id, @amount, @currency)
RETURNING id, account_id, session_id, payment_intent, amount, currency, status, checkout_url, paid_event_id, created_at, paid_at;

-- name: TopupsSetSession :one
-- Attaches the Checkout Session created for a pending order. Returns no row when the order does not
-- exist or already has a session.
UPDATE topups
SET session_id = @session_id, checkout_url = @checkout_url
WHERE id = @id
  AND session_id IS NULL
RETURNING id, account_id, session_id, payment_intent, amount, currency, status, checkout_url, paid_event_id, created_at, paid_at;

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
RETURNING id, account_id, session_id, payment_intent, amount, currency, status, checkout_url, paid_event_id, created_at, paid_at;

-- name: TopupsGet :one
-- Returns no row when the order does not exist.
SELECT id, account_id, session_id, payment_intent, amount, currency, status, checkout_url, paid_event_id, created_at, paid_at
FROM topups
WHERE id = @id;

-- name: TopupsGetBySession :one
-- Returns no row when the session has no order.
SELECT id, account_id, session_id, payment_intent, amount, currency, status, checkout_url, paid_event_id, created_at, paid_at
FROM topups
WHERE session_id = @session_id;

-- name: TopupsGetByPaymentIntent :one
-- The paid order of a payment: how refunds and disputes, whose own metadata is empty, find their
-- account. Returns no row when the payment is not (yet) recorded.
SELECT id, account_id, session_id, payment_intent, amount, currency, status, checkout_url, paid_event_id, created_at, paid_at
FROM topups
WHERE payment_intent = @payment_intent::text;
