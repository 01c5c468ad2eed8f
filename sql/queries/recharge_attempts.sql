-- name: RechargeAttemptsTakeJobs :many
-- Takes the attempts whose PaymentIntent job is still to enqueue, oldest first (at most max_rows): marks
-- them enqueued and returns them, in one statement, and the caller enqueues their jobs (and their
-- recharge.requested) in the same transaction, so the jobs and the marks commit together. Two sweepers never take one attempt: the
-- second's UPDATE waits for the first's and then finds it marked. No row is locked before the update
-- (a cluster locks rows only in single-shard statements).
UPDATE recharge_attempts r
SET job_enqueued_at = now()
FROM (
    SELECT account_id, id FROM recharge_attempts WHERE job_enqueued_at IS NULL ORDER BY id LIMIT @max_rows
) due
WHERE r.account_id = due.account_id
  AND r.id = due.id
  AND r.job_enqueued_at IS NULL
RETURNING r.account_id, r.id, r.episode, r.retry, r.amount, r.created_at;

-- name: RechargeAttemptsTakeNotices :many
-- Takes the resolved attempts whose notification is still to enqueue, like RechargeAttemptsTakeJobs.
UPDATE recharge_attempts r
SET notice_enqueued_at = now()
FROM (
    SELECT account_id, id FROM recharge_attempts
    WHERE status <> 'requested' AND notice_enqueued_at IS NULL
    ORDER BY id
    LIMIT @max_rows
) due
WHERE r.account_id = due.account_id
  AND r.id = due.id
  AND r.notice_enqueued_at IS NULL
RETURNING r.account_id, r.id, r.status, r.amount, r.payment_intent, r.failure_code, r.disabled_recharge, r.resolved_at,
          r.decline_code, r.hard_decline, r.retry, r.retry_at;

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
       created_at, resolved_at, retry, decline_code, hard_decline, retry_at
FROM recharge_attempts
WHERE account_id = @account_id
  AND topup_id = @topup_id;

-- name: RechargeAttemptsResolve :one
-- Resolves a requested attempt, once: only the transaction whose UPDATE finds it requested gets a row
-- (and so counts a failure or sends a notification). The schema tells a hard decline from its code
-- (hard_decline). Returns no row when it was already resolved.
UPDATE recharge_attempts
SET status = @status, failure_code = sqlc.narg(failure_code), decline_code = sqlc.narg(decline_code),
    resolved_at = now(), payment_intent = coalesce(payment_intent, sqlc.narg(payment_intent))
WHERE account_id = @account_id
  AND id = @id
  AND status = 'requested'
RETURNING id, retry, hard_decline;

-- name: RechargeAttemptsScheduleRetry :exec
-- A soft failure that left recharge on: the episode's next try is due after the ladder's backoff for
-- this try, or at the cooldown's end if that is later. (The due time is computed before it meets a
-- column, so that Citus evaluates now() once.)
UPDATE recharge_attempts r
SET retry_at = greatest((SELECT now() + @backoff::interval), a.recharge_next_eligible_at)
FROM accounts a
WHERE r.account_id = @account_id
  AND r.id = @id
  AND a.id = r.account_id
  AND r.retry < 3;

-- name: RechargeAttemptsTakeRetries :many
-- Takes the failed attempts whose retry job is still to enqueue, like RechargeAttemptsTakeJobs: the
-- caller enqueues each job scheduled at retry_at in the same transaction.
UPDATE recharge_attempts r
SET retry_enqueued_at = now()
FROM (
    SELECT account_id, id FROM recharge_attempts
    WHERE retry_at IS NOT NULL AND retry_enqueued_at IS NULL
    ORDER BY id
    LIMIT @max_rows
) due
WHERE r.account_id = due.account_id
  AND r.id = due.id
  AND r.retry_enqueued_at IS NULL
RETURNING r.account_id, r.id, r.episode, r.retry, r.retry_at::timestamptz AS retry_at;

-- name: RechargeAttemptsMarkDisabled :exec
-- The failure that turned recharge off says so, for its notification.
UPDATE recharge_attempts
SET disabled_recharge = true
WHERE account_id = @account_id
  AND id = @id;

-- name: RechargeAttemptsList :many
-- An account's attempts, newest first.
SELECT account_id, id, episode, topup_id, amount, status, payment_intent, failure_code, disabled_recharge,
       created_at, resolved_at, retry, decline_code, hard_decline, retry_at
FROM recharge_attempts
WHERE account_id = @account_id
ORDER BY id DESC
LIMIT @max_rows;
