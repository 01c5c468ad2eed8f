-- name: RechargeBlocksTakeNotices :many
-- Takes the blocks whose recharge.blocked is still to enqueue, like RechargeAttemptsTakeJobs: one per
-- (account, episode, reason), since the key allows no more.
UPDATE recharge_blocks b
SET notice_enqueued_at = now()
FROM (
    SELECT account_id, episode, reason FROM recharge_blocks
    WHERE notice_enqueued_at IS NULL
    ORDER BY blocked_at
    LIMIT @max_rows
) due
WHERE b.account_id = due.account_id
  AND b.episode = due.episode
  AND b.reason = due.reason
  AND b.notice_enqueued_at IS NULL
RETURNING b.account_id, b.episode, b.reason, b.blocked_at, b.next_eligible_at;
