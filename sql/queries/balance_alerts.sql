-- name: BalanceAlertsOutbox :many
-- Alerts whose balance.low or balance.recovered notification is still to enqueue, locked so that two
-- sweepers take different ones.
SELECT account_id, threshold, episode, low_available, low_at, recovered_available, recovered_at,
       (low_enqueued_at IS NULL)::boolean AS low_pending,
       (recovered_at IS NOT NULL AND recovered_enqueued_at IS NULL)::boolean AS recovered_pending
FROM balance_alerts
WHERE low_enqueued_at IS NULL
   OR (recovered_at IS NOT NULL AND recovered_enqueued_at IS NULL)
ORDER BY low_at
LIMIT @max_rows
FOR UPDATE SKIP LOCKED;

-- name: BalanceAlertsMarkEnqueued :exec
-- Marks what was enqueued: the low alert always, the recovery when it had happened.
UPDATE balance_alerts b
SET low_enqueued_at = coalesce(b.low_enqueued_at, now()),
    recovered_enqueued_at = CASE WHEN b.recovered_at IS NOT NULL THEN coalesce(b.recovered_enqueued_at, now()) END
WHERE (b.account_id, b.threshold, b.episode) IN (
    SELECT unnest(@account_ids::text[]), unnest(@thresholds::bigint[]), unnest(@episodes::bigint[])
);

-- name: BalanceAlertsList :many
-- An account's alert episodes, oldest first.
SELECT account_id, threshold, episode, low_available, low_at, recovered_available, recovered_at
FROM balance_alerts
WHERE account_id = @account_id
ORDER BY low_at, episode;
