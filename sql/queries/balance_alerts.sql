-- name: BalanceAlertsTake :many
-- Takes the alerts whose balance.low or balance.recovered notification is still to enqueue (at most
-- max_rows, oldest first): marks what is enqueued (the low alert always, the recovery when it happened)
-- and returns each with what was pending, in one statement, like RechargeAttemptsTakeJobs.
UPDATE balance_alerts b
-- The time comes from the subquery: a cluster takes no function call in an UPDATE's CASE or COALESCE.
SET low_enqueued_at = coalesce(b.low_enqueued_at, due.at),
    recovered_enqueued_at = CASE WHEN b.recovered_at IS NOT NULL THEN coalesce(b.recovered_enqueued_at, due.at) END
FROM (
    SELECT account_id, threshold, episode, now() AS at,
           (low_enqueued_at IS NULL) AS low_pending,
           (recovered_at IS NOT NULL AND recovered_enqueued_at IS NULL) AS recovered_pending
    FROM balance_alerts
    WHERE low_enqueued_at IS NULL
       OR (recovered_at IS NOT NULL AND recovered_enqueued_at IS NULL)
    ORDER BY low_at
    LIMIT @max_rows
) due
WHERE b.account_id = due.account_id
  AND b.threshold = due.threshold
  AND b.episode = due.episode
  -- After waiting for another sweeper, only what is still pending as this one read it.
  AND (NOT due.low_pending OR b.low_enqueued_at IS NULL)
  AND (NOT due.recovered_pending OR b.recovered_enqueued_at IS NULL)
RETURNING b.account_id, b.threshold, b.episode, b.low_available, b.low_at, b.recovered_available, b.recovered_at,
          due.low_pending::boolean AS low_pending, due.recovered_pending::boolean AS recovered_pending;

-- name: BalanceAlertsList :many
-- An account's alert episodes, oldest first.
SELECT account_id, threshold, episode, low_available, low_at, recovered_available, recovered_at
FROM balance_alerts
WHERE account_id = @account_id
ORDER BY low_at, episode;
