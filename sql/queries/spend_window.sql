-- Spend windows (SPEC §16): what each limit counted per calendar window in UTC. Every statement here
-- runs under the account's row lock (accounts in id order), as every write to holds and the ledger does,
-- so a window moves under one lock order. An authorisation opens its windows first (SpendWindowsOpen,
-- INSERT ... ON CONFLICT DO NOTHING), so that the statement that counts finds them and its conditions
-- judge the current rows; billing inserts a window nothing counted in yet with its counts.
-- (The file is named in the singular: Go would build a generated spend_windows.sql.go for Windows only.)

-- name: SpendWindowsOpen :many
-- Opens the current window (on the database clock) of every limit of the locked account, and returns
-- each limit with it: what an authorisation is judged against (HoldsInsertGroup keeps the rule, this
-- read plans a group and names the limit that refuses). Empty when the account has no limits.
WITH current_windows AS (
    SELECT l.id, l.scope, l.scope_value, l.period, l.amount, l.mode,
           date_trunc(l.period, now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS window_start
    FROM spend_limits l
    WHERE l.account_id = @account_id::text
), opened AS (
    INSERT INTO spend_windows (account_id, limit_id, window_start)
    SELECT @account_id::text, id, window_start
    FROM current_windows
    ON CONFLICT ON CONSTRAINT spend_windows_pkey DO NOTHING
    RETURNING limit_id
)
SELECT c.id, c.scope, coalesce(c.scope_value, '')::text AS scope_value, c.period, c.amount, c.mode,
       c.window_start::timestamptz AS window_start,
       coalesce(w.spent, 0)::bigint AS spent, coalesce(w.held, 0)::bigint AS held
FROM current_windows c
LEFT JOIN spend_windows w
    ON w.account_id = @account_id::text AND w.limit_id = c.id AND w.window_start = c.window_start
ORDER BY c.id;

-- name: SpendWindowsRelease :exec
-- Resolves a hold in the windows it was counted in (its limit_ids and window_starts, in lockstep), in the
-- transaction that moved it out of held: its amount leaves held, and captured (0 for a void or an
-- expiry) is spent. A limit created after the hold (hold_created_at), under an id the hold names, never
-- counted it and is left alone.
UPDATE spend_windows w
SET held = w.held - @amount::bigint, spent = w.spent + @captured::bigint
FROM (
    SELECT unnest(@limit_ids::text[]) AS limit_id, unnest(@window_starts::timestamptz[]) AS window_start
) c
JOIN spend_limits l ON l.account_id = @account_id::text AND l.id = c.limit_id AND l.created_at <= @hold_created_at::timestamptz
WHERE w.account_id = @account_id::text
  AND w.limit_id = c.limit_id
  AND w.window_start = c.window_start;

-- name: SpendWindowsBill :many
-- In the billing transaction that posted them: counts what billed decisions spent beyond their hold
-- (amounts, in lockstep with the decisions, of locked accounts; the captured part is moved by
-- HoldsCaptureForDecisions) as spent, in the window of their received_at of every limit that applies,
-- set-based, in one statement: the decisions summed per account, subject, feature and UTC day (every
-- period is whole days), then per window; a window nothing counted in yet is inserted with its counts,
-- the others updated (the UPDATE's snapshot does not see the rows the INSERT adds, so nothing is counted
-- twice). Billed in full whatever the cap (the work was done): what a hard limit's window takes past its
-- cap is counted in over; a soft limit's window reaching its cap records reached_at (limit.reached,
-- once per window). Returns the windows moved with the overshoot each took now.
WITH daily AS (
    SELECT d.account_id, d.subject, d.feature, date_trunc('day', d.received_at AT TIME ZONE 'UTC') AS day,
           sum(b.amount) AS amount
    FROM (
        -- Set-returning functions in one select list run in lockstep: the arrays zipped, each read once.
        SELECT unnest(@account_ids::text[]) AS account_id, unnest(@decision_ids::text[]) AS decision_id,
               unnest(@amounts::bigint[]) AS amount
    ) b
    JOIN decisions d ON d.account_id = b.account_id AND d.id = b.decision_id
    GROUP BY 1, 2, 3, 4
), per_window AS (
    SELECT l.account_id, l.id AS limit_id, min(l.amount) AS cap, min(l.mode) AS mode,
           date_trunc(l.period, c.day) AT TIME ZONE 'UTC' AS window_start, sum(c.amount) AS amount, now() AS at
    FROM daily c
    JOIN spend_limits l
        ON l.account_id = c.account_id
       AND (l.scope = 'account' OR l.scope_value = CASE l.scope WHEN 'subject' THEN c.subject ELSE c.feature END)
    GROUP BY l.account_id, l.id, date_trunc(l.period, c.day)
), opened AS (
    INSERT INTO spend_windows (account_id, limit_id, window_start, spent, over, reached_at)
    SELECT account_id, limit_id, window_start, amount,
           CASE WHEN mode = 'hard' THEN greatest(0, amount - cap) ELSE 0 END,
           CASE WHEN mode = 'soft' AND amount >= cap THEN at END
    FROM per_window
    ON CONFLICT ON CONSTRAINT spend_windows_pkey DO NOTHING
    RETURNING account_id, limit_id, window_start, over
), moved AS (
    UPDATE spend_windows w
    SET spent = w.spent + p.amount,
        over = w.over + CASE WHEN p.mode = 'hard' THEN greatest(0, least(p.amount, w.spent + w.held + p.amount - p.cap)) ELSE 0 END,
        reached_at = CASE WHEN p.mode = 'soft' AND w.reached_at IS NULL AND w.spent + w.held + p.amount >= p.cap
                          THEN p.at ELSE w.reached_at END
    FROM per_window p
    WHERE w.account_id = p.account_id
      AND w.limit_id = p.limit_id
      AND w.window_start = p.window_start
      -- Not a window the INSERT opened: PostgreSQL's snapshot would not show it here, but Citus runs the
      -- INSERT before this UPDATE, which then sees it and would count its decisions twice.
      AND NOT EXISTS (
          SELECT 1 FROM opened o
          WHERE o.account_id = p.account_id AND o.limit_id = p.limit_id AND o.window_start = p.window_start
      )
    RETURNING w.account_id, w.limit_id, w.window_start,
              CASE WHEN p.mode = 'hard' THEN greatest(0, least(p.amount, w.spent + w.held - p.cap)) ELSE 0 END AS over
)
SELECT account_id, limit_id, window_start, over::bigint AS over_now FROM opened
UNION ALL
SELECT account_id, limit_id, window_start, over::bigint AS over_now FROM moved;

-- name: SpendWindowsTakeReached :many
-- Takes the soft limits' windows whose limit.reached is still to enqueue (at most max_rows, oldest
-- first): marks them enqueued and returns them, in one statement, like BalanceAlertsTake. The caller
-- enqueues in the same transaction: one notification per (account, limit, window).
UPDATE spend_windows w
SET reached_enqueued_at = due.at
FROM (
    SELECT account_id, limit_id, window_start, now() AS at
    FROM spend_windows
    WHERE reached_at IS NOT NULL
      AND reached_enqueued_at IS NULL
    ORDER BY reached_at
    LIMIT @max_rows
) due
WHERE w.account_id = due.account_id
  AND w.limit_id = due.limit_id
  AND w.window_start = due.window_start
  AND w.reached_enqueued_at IS NULL
RETURNING w.account_id, w.limit_id, w.window_start, w.spent, w.held, w.reached_at::timestamptz AS reached_at;

-- name: SpendWindowsHeldMismatches :many
-- Windows whose held differs from the sum of the holds still held that were counted in them (verify).
-- Empty when the invariant holds.
WITH counted AS (
    SELECT h.account_id, l.id AS limit_id, h.window_starts[k] AS window_start, sum(h.amount) AS total
    FROM holds h
    CROSS JOIN LATERAL generate_subscripts(h.limit_ids, 1) AS k
    JOIN spend_limits l ON l.account_id = h.account_id AND l.id = h.limit_ids[k] AND l.created_at <= h.created_at
    WHERE h.status = 'held'
    GROUP BY h.account_id, l.id, h.window_starts[k]
)
SELECT w.account_id, w.limit_id, w.window_start, w.held, coalesce(c.total, 0)::bigint AS holds_sum
FROM spend_windows w
LEFT JOIN counted c ON c.account_id = w.account_id AND c.limit_id = w.limit_id AND c.window_start = w.window_start
WHERE w.held <> coalesce(c.total, 0)
ORDER BY 1, 2, 3
LIMIT 1000;

-- name: SpendWindowsSpentMismatches :many
-- Windows whose spent differs from what was counted to them (verify): the captured amounts of the holds
-- counted in them, plus what each billed decision of the limit's scope received in the window spent
-- beyond the hold it captured (its entry decision:{id}, less that capture). A window is recounted only
-- when its limit kept one definition through it (defined_at at or before window_start): a replaced
-- limit counted its earlier decisions under its earlier scope. Empty when the invariant holds.
WITH captured AS (
    SELECT h.account_id, l.id AS limit_id, h.window_starts[k] AS window_start, sum(h.captured_amount) AS total
    FROM holds h
    CROSS JOIN LATERAL generate_subscripts(h.limit_ids, 1) AS k
    JOIN spend_limits l ON l.account_id = h.account_id AND l.id = h.limit_ids[k] AND l.created_at <= h.created_at
    WHERE h.status = 'captured'
    GROUP BY h.account_id, l.id, h.window_starts[k]
), decided AS (
    SELECT l.account_id, l.id AS limit_id,
           date_trunc(l.period, d.received_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS window_start,
           sum(-e.amount - coalesce(h.captured_amount, 0)) AS total
    FROM decisions d
    JOIN ledger e ON e.account_id = d.account_id AND e.dedupe_key = 'decision:' || d.id
    LEFT JOIN holds h ON h.account_id = d.account_id AND h.id = d.hold_id AND h.decision_id = d.id
    JOIN spend_limits l
        ON l.account_id = d.account_id
       AND (l.scope = 'account' OR l.scope_value = CASE l.scope WHEN 'subject' THEN d.subject ELSE d.feature END)
    GROUP BY 1, 2, 3
)
SELECT w.account_id, w.limit_id, w.window_start, w.spent,
       (coalesce(c.total, 0) + coalesce(x.total, 0))::bigint AS counted
FROM spend_windows w
JOIN spend_limits l ON l.account_id = w.account_id AND l.id = w.limit_id
LEFT JOIN captured c ON c.account_id = w.account_id AND c.limit_id = w.limit_id AND c.window_start = w.window_start
LEFT JOIN decided x ON x.account_id = w.account_id AND x.limit_id = w.limit_id AND x.window_start = w.window_start
WHERE l.defined_at <= w.window_start
  AND w.spent <> coalesce(c.total, 0) + coalesce(x.total, 0)
ORDER BY 1, 2, 3
LIMIT 1000;
