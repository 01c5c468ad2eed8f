-- name: RechargeStatusGet :one
-- An account's recharge status now, on the database clock (recharge_status_compute: the one place it is
-- derived; the stored status, which the same transaction's changes and the sweep keep equal to it, is
-- what its changes are told from). Returns no row when the account does not exist.
SELECT c.status::text AS status,
       (CASE WHEN c.next_eligible_at IS NOT NULL THEN c.next_eligible_at END) AS next_eligible_at,
       (CASE WHEN c.window_start IS NOT NULL THEN c.window_start END) AS window_start,
       c.window_attempts::integer AS window_attempts,
       c.window_recharged_amount::bigint AS window_recharged_amount
FROM recharge_status_compute(@id::text) c;

-- name: RechargeStatusSync :one
-- Moves the account's stored recharge status to the computed one and records the change once, for
-- reason (recharge_status_sync). In the transaction that changed what the status is computed from.
SELECT recharge_status_sync(@account_id::text, @reason::text)::boolean AS changed;

-- name: RechargeStatusDue :many
-- The accounts whose stored cooling_down or budget_exhausted status has reached its end on the database
-- clock, with the reason its end gives.
SELECT id,
       (CASE recharge_status WHEN 'cooling_down' THEN 'cooldown_ended' ELSE 'window_ended' END)::text AS reason
FROM accounts
WHERE recharge_status IN ('cooling_down', 'budget_exhausted')
  AND recharge_status_next_eligible_at <= now()
ORDER BY recharge_status_next_eligible_at
LIMIT @max_rows;

-- name: RechargeStatusTakeNotices :many
-- Takes the status changes whose recharge.status_changed is still to enqueue, like
-- RechargeBlocksTakeNotices: one per (account, transition number), since the key allows no more.
UPDATE recharge_status_changes c
SET notice_enqueued_at = now()
FROM (
    SELECT account_id, seq FROM recharge_status_changes
    WHERE notice_enqueued_at IS NULL
    ORDER BY changed_at
    LIMIT @max_rows
) due
WHERE c.account_id = due.account_id
  AND c.seq = due.seq
  AND c.notice_enqueued_at IS NULL
RETURNING c.account_id, c.seq, c.from_status, c.to_status, c.reason, c.next_eligible_at, c.changed_at;
