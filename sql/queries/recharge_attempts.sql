-- name: RechargeAttemptsJobOutbox :many
-- Attempts whose PaymentIntent job is still to enqueue, oldest first, locked so that two sweepers take
-- different ones (SKIP LOCKED) and mark them in the transaction that enqueues their jobs.
SELECT account_id, id
FROM recharge_attempts
WHERE job_enqueued_at IS NULL
ORDER BY id
LIMIT @max_rows
FOR UPDATE SKIP LOCKED;

-- name: RechargeAttemptsMarkJobEnqueued :exec
-- Attempt ids come from one sequence, so the ids alone name the rows; the accounts keep the lookup on
-- the key (account_id, id).
UPDATE recharge_attempts
SET job_enqueued_at = now()
WHERE account_id = ANY(@account_ids::text[])
  AND id = ANY(@ids::bigint[]);

-- name: RechargeAttemptsNoticeOutbox :many
-- Resolved attempts whose notification is still to enqueue, locked like the job outbox.
SELECT account_id, id, status, amount, payment_intent, failure_code, disabled_recharge, resolved_at
FROM recharge_attempts
WHERE status <> 'requested'
  AND notice_enqueued_at IS NULL
ORDER BY id
LIMIT @max_rows
FOR UPDATE SKIP LOCKED;

-- name: RechargeAttemptsMarkNoticeEnqueued :exec
-- Attempt ids come from one sequence, so the ids alone name the rows; the accounts keep the lookup on
-- the key (account_id, id).
UPDATE recharge_attempts
SET notice_enqueued_at = now()
WHERE account_id = ANY(@account_ids::text[])
  AND id = ANY(@ids::bigint[]);

-- name: RechargeAttemptsGetForCharge :one
-- What the job needs to charge an attempt: its order and amount, and the account's currency and saved
-- card as they are now. Returns no row when the attempt does not exist.
SELECT r.account_id, r.id, r.topup_id, r.amount, r.status, r.payment_intent, a.currency,
       a.stripe_customer, a.payment_method
FROM recharge_attempts r
JOIN accounts a ON a.id = r.account_id
WHERE r.account_id = @account_id
  AND r.id = @id;

-- name: RechargeAttemptsSetPaymentIntent :exec
-- Records the PaymentIntent the job created (the same one on every retry: Stripe's idempotency).
UPDATE recharge_attempts
SET payment_intent = @payment_intent
WHERE account_id = @account_id
  AND id = @id
  AND payment_intent IS NULL;

-- name: RechargeAttemptsGetByTopup :one
-- The attempt that owns an order. Returns no row for an order no attempt owns (Checkout).
SELECT account_id, id, episode, topup_id, amount, status, payment_intent, failure_code, disabled_recharge,
       created_at, resolved_at
FROM recharge_attempts
WHERE account_id = @account_id
  AND topup_id = @topup_id;

-- name: RechargeAttemptsResolve :one
-- Resolves a requested attempt, once: only the transaction whose UPDATE finds it requested gets a row
-- (and so counts a failure or sends a notification). Returns no row when it was already resolved.
UPDATE recharge_attempts
SET status = @status, failure_code = sqlc.narg(failure_code), resolved_at = now(),
    payment_intent = coalesce(payment_intent, sqlc.narg(payment_intent))
WHERE account_id = @account_id
  AND id = @id
  AND status = 'requested'
RETURNING id;

-- name: RechargeAttemptsMarkDisabled :exec
-- The failure that turned recharge off says so, for its notification.
UPDATE recharge_attempts
SET disabled_recharge = true
WHERE account_id = @account_id
  AND id = @id;

-- name: RechargeAttemptsList :many
-- An account's attempts, newest first.
SELECT account_id, id, episode, topup_id, amount, status, payment_intent, failure_code, disabled_recharge,
       created_at, resolved_at
FROM recharge_attempts
WHERE account_id = @account_id
ORDER BY id DESC
LIMIT @max_rows;
