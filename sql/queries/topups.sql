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

-- name: TopupsPaySession :one
-- A Checkout Session's order made paid in one statement, by the webhook's first delivery of its
-- completion (the happy path, which read the order before its transaction): the session's pending
-- order of this amount and currency moves to paid, or, when the session has no order yet, its order is
-- recorded already paid, on an account of the session's currency (money is never converted). Either
-- way at most once per session: the UPDATE finds the order only while
-- it is pending, and the INSERT, under topups_session_id_key, waits for a concurrent insert of the same
-- session and then inserts nothing. Returns the order only when this statement made it paid; no row
-- when it was paid or expired before, holds another amount or currency, or was recorded by another
-- transaction meanwhile (the caller then rolls back and takes the general path). parked_waiting says
-- whether events are parked waiting for the payment: run after StripeEventsLockPayment, this
-- statement's snapshot sees a refund parked while the lock was awaited, and the caller rolls back
-- for the general path, which re-applies them. Fails with topups_payment_intent_key when the payment
-- already paid another order. Returns no row either when the account does not exist or is of another
-- currency.
WITH paid_pending AS (
    UPDATE topups t
    SET status = 'paid', payment_intent = @payment_intent::text, paid_event_id = @paid_event_id::text, paid_at = now()
    WHERE t.session_id = @session_id::text
      AND t.status = 'pending'
      AND t.amount = @amount::bigint
      AND lower(t.currency) = lower(@currency::text)
    RETURNING t.id, t.account_id, t.session_id, t.payment_intent, t.amount, t.currency, t.status, t.checkout_url,
              t.paid_event_id, t.created_at, t.paid_at, t.idempotency_key, t.request_fingerprint
), recorded_paid AS (
    INSERT INTO topups (id, account_id, session_id, amount, currency, status, payment_intent, paid_event_id, paid_at)
    SELECT @id::text, a.id, @session_id::text, @amount::bigint, a.currency, 'paid',
           @payment_intent::text, @paid_event_id::text, now()
    FROM accounts a
    WHERE a.id = @account_id::text
      AND lower(a.currency) = lower(@currency::text)
      AND NOT EXISTS (SELECT 1 FROM topups WHERE session_id = @session_id::text)
    ON CONFLICT (session_id) DO NOTHING
    RETURNING id, account_id, session_id, payment_intent, amount, currency, status, checkout_url, paid_event_id,
              created_at, paid_at, idempotency_key, request_fingerprint
), paid AS (
    SELECT * FROM paid_pending
    UNION ALL
    SELECT * FROM recorded_paid
)
SELECT paid.id, paid.account_id, paid.session_id, paid.payment_intent, paid.amount, paid.currency, paid.status,
       paid.checkout_url, paid.paid_event_id, paid.created_at, paid.paid_at, paid.idempotency_key,
       paid.request_fingerprint,
       EXISTS (
           SELECT 1 FROM stripe_events e
           WHERE e.outcome = 'parked'
             AND e.parked_reason = 'unknown_payment'
             AND e.payment_intent = @payment_intent::text
       ) AS parked_waiting
FROM paid;

-- name: TopupsPaySessions :many
-- TopupsPaySession for a group of Checkout Sessions in one statement (the webhook's group commit of
-- first deliveries, after StripeEventsLockPayments); the arrays are read in lockstep, one element per
-- session, each session and payment at most once in a group. Each session's pending order of its
-- amount and currency moves to paid, or, when the session has no order yet, its order is recorded
-- already paid on an account of the session's currency; at most once per session, as the single
-- statement holds it (the UPDATE finds an order only while pending, the INSERT waits for a concurrent
-- insert of the same session under topups_session_id_key and then inserts nothing). Returns one row per
-- session this statement made paid, with its account and whether events are parked waiting for its
-- payment; a session without a row was paid, expired, of another amount or currency, or of an account
-- that does not exist or has another currency. Fails as a whole with topups_payment_intent_key when a
-- payment already paid another order.
WITH session AS (
    SELECT (@ids::text[])[i] AS id, (@account_ids::text[])[i] AS account_id, (@session_ids::text[])[i] AS session_id,
           (@payment_intents::text[])[i] AS payment_intent, (@paid_event_ids::text[])[i] AS paid_event_id,
           (@amounts::bigint[])[i] AS amount, (@currencies::text[])[i] AS currency
    FROM generate_subscripts(@ids::text[], 1) AS i
), paid_pending AS (
    UPDATE topups t
    SET status = 'paid', payment_intent = s.payment_intent, paid_event_id = s.paid_event_id, paid_at = now()
    FROM session s
    WHERE t.session_id = s.session_id
      -- = ANY on topups_session_id_key: an index scan, whatever the planner guesses of the arrays.
      AND t.session_id = ANY(@session_ids::text[])
      AND t.status = 'pending'
      AND t.amount = s.amount
      AND lower(t.currency) = lower(s.currency)
    RETURNING t.session_id, t.account_id, t.payment_intent
), recorded_paid AS (
    INSERT INTO topups (id, account_id, session_id, amount, currency, status, payment_intent, paid_event_id, paid_at)
    SELECT s.id, a.id, s.session_id, s.amount, a.currency, 'paid', s.payment_intent, s.paid_event_id, now()
    FROM session s
    JOIN accounts a ON a.id = s.account_id AND lower(a.currency) = lower(s.currency)
    WHERE a.id = ANY(@account_ids::text[])
      AND NOT EXISTS (SELECT 1 FROM topups t WHERE t.session_id = s.session_id)
    ON CONFLICT (session_id) DO NOTHING
    RETURNING session_id, account_id, payment_intent
), paid AS (
    SELECT * FROM paid_pending
    UNION ALL
    SELECT * FROM recorded_paid
)
SELECT paid.session_id::text AS session_id, paid.account_id::text AS account_id,
       EXISTS (
           SELECT 1 FROM stripe_events e
           WHERE e.outcome = 'parked'
             AND e.parked_reason = 'unknown_payment'
             AND e.payment_intent = paid.payment_intent
       ) AS parked_waiting
FROM paid;

-- name: TopupsListForPayments :many
-- The orders of any of the given payments, Checkout Sessions or order ids (topups_payment_intent_key,
-- topups_session_id_key, topups_pkey): what makes a listed Stripe object this deployment's, for the
-- drift pass, and the account it is on. Ids that name no order return nothing.
SELECT id, account_id, session_id, payment_intent, amount, currency, status, checkout_url, paid_event_id, created_at, paid_at,
       idempotency_key, request_fingerprint
FROM topups
WHERE payment_intent = ANY(@payment_intents::text[])
   OR session_id = ANY(@session_ids::text[])
   OR id = ANY(@ids::text[]);
