-- Spend limits (SPEC §16): an account's caps per calendar period. Windows are counted in
-- spend_window.sql; the admission rule is part of HoldsInsertGroup.

-- name: SpendLimitsPut :one
-- Creates the limit, or replaces its definition (scope, value, period, amount, mode) keeping its windows
-- and what they counted; defined_at moves to now (the proposed row's default: a cluster takes no
-- function call in DO UPDATE SET). Fails with spend_limits_account_fk when the account does
-- not exist, and with the limit's named checks on bad input.
INSERT INTO spend_limits (account_id, id, scope, scope_value, period, amount, mode)
VALUES (@account_id, @id, @scope, sqlc.narg(scope_value), @period, @amount, @mode)
ON CONFLICT (account_id, id) DO UPDATE
SET scope = EXCLUDED.scope, scope_value = EXCLUDED.scope_value, period = EXCLUDED.period,
    amount = EXCLUDED.amount, mode = EXCLUDED.mode, defined_at = EXCLUDED.defined_at
RETURNING account_id, id, scope, scope_value, period, amount, mode, created_at, defined_at;

-- name: SpendLimitsDelete :execrows
-- Deletes the limit and its windows (spend_windows_limit_fk cascades; the holds they counted stay).
-- Returns 0 when the account has no such limit.
DELETE FROM spend_limits
WHERE account_id = @account_id
  AND id = @id;

-- name: SpendLimitsWithWindows :many
-- The account's limits, by id, each with its current window on the database clock (zeros when nothing
-- counted in it yet): what GET …/limits and the console show.
SELECT l.id, l.scope, coalesce(l.scope_value, '')::text AS scope_value, l.period, l.amount, l.mode, l.created_at,
       c.window_start::timestamptz AS window_start,
       (c.window_start + ('1 ' || l.period)::interval)::timestamptz AS window_end,
       coalesce(w.spent, 0)::bigint AS spent, coalesce(w.held, 0)::bigint AS held, coalesce(w.over, 0)::bigint AS over
FROM spend_limits l
CROSS JOIN LATERAL (SELECT date_trunc(l.period, now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS window_start) c
LEFT JOIN spend_windows w
    ON w.account_id = l.account_id AND w.limit_id = l.id AND w.window_start = c.window_start
WHERE l.account_id = @account_id
ORDER BY l.id;
