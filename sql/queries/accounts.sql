-- name: AccountsInsert :one
-- Creates the account unless one with this id exists. Returns no row when it already existed:
-- the primary key, not a prior read, decides which of several concurrent creations wins.
INSERT INTO accounts (id, currency)
VALUES (@id, @currency)
ON CONFLICT (id) DO NOTHING
RETURNING id, currency, balance, created_at, held;

-- name: AccountsGet :one
-- Returns no row when the account does not exist.
SELECT id, currency, balance, created_at, held
FROM accounts
WHERE id = @id;

-- name: AccountsBalanceAdd :one
-- Moves the cached balance by amount, in the transaction that inserted the matching ledger entry.
-- Returns no row when the account does not exist.
UPDATE accounts
SET balance = balance + @amount
WHERE id = @id
RETURNING balance;

-- name: AccountsBalanceAddNoOverdraw :one
-- Like AccountsBalanceAdd, but refuses to take the balance below zero. The condition is evaluated on
-- the locked, current row (not on an earlier read), so concurrent debits can never overdraw together.
-- Returns no row when the account does not exist or the balance would go below zero.
UPDATE accounts
SET balance = balance + @amount
WHERE id = @id
  AND balance + @amount >= 0
RETURNING balance;

-- name: AccountsBalanceAddGroup :one
-- Moves the cached balance by a posting group's entries (amounts, in the order they were inserted),
-- in the transaction that inserted them, on the row the group locked. The no-overdraw rule is held
-- here, not only by the group's plan: the update happens only if the running balance after each
-- entry flagged no_overdraw (the arrays read in lockstep) is not below zero, exactly as
-- AccountsBalanceAddNoOverdraw applied one entry at a time would allow. Entries not flagged (usage,
-- reversals) may take it below zero. Returns no row when the account does not exist or a flagged
-- entry would overdraw: the whole group then fails and nothing it inserted commits. Sums are numeric,
-- so a total beyond bigint fails with numeric_value_out_of_range instead of wrapping.
WITH steps AS (
    SELECT (@no_overdraw::boolean[])[i] AS no_overdraw,
           sum((@amounts::bigint[])[i]::numeric) OVER (ORDER BY i) AS running
    FROM generate_subscripts(@amounts::bigint[], 1) AS i
)
UPDATE accounts a
SET balance = (a.balance + coalesce((SELECT sum(x::numeric) FROM unnest(@amounts::bigint[]) AS x), 0))::bigint
WHERE a.id = @id
  AND NOT EXISTS (
    SELECT 1
    FROM steps
    WHERE steps.no_overdraw
      AND a.balance + steps.running < 0
  )
RETURNING a.balance;


-- name: AccountsHeldReserve :one
-- Reserves amount for a hold: held grows only while the available balance (balance - held) covers it.
-- The condition is evaluated on the locked, current row (not on an earlier read), so concurrent
-- authorisations can never reserve more than is available together. Returns no row when the account
-- does not exist or the available balance is short.
UPDATE accounts
SET held = held + @amount
WHERE id = @id
  AND balance - held >= @amount
RETURNING balance, held;

-- name: AccountsHeldRelease :one
-- Releases a resolved hold's reservation, in the transaction that moved the hold out of held
-- (accounts_held_nonnegative_check refuses a release that was never reserved). Returns no row when
-- the account does not exist.
UPDATE accounts
SET held = held - @amount
WHERE id = @id
RETURNING balance, held;

-- name: AccountsBalanceMismatches :many
-- Accounts whose cached balance differs from the sum of their ledger entries (verify). Empty when the
-- invariant holds.
SELECT a.id, a.balance AS cached, coalesce(l.total, 0)::bigint AS ledger_sum
FROM accounts a
LEFT JOIN (
    SELECT account_id, sum(amount) AS total
    FROM ledger
    GROUP BY account_id
) l ON l.account_id = a.id
WHERE a.balance <> coalesce(l.total, 0)
ORDER BY a.id;

-- name: AccountsLockForBilling :many
-- Locks the existing accounts among ids, in id order, before the chunk inserts anything: two
-- reconcilers (or any two billing transactions) take their account locks in the same order, so they
-- queue instead of deadlocking. FOR NO KEY UPDATE is the lock the balance update takes anyway; it
-- leaves other entries' foreign-key checks free. Accounts that do not exist are simply not returned.
SELECT id
FROM accounts
WHERE id = ANY(@ids::text[])
ORDER BY id
FOR NO KEY UPDATE;

-- name: AccountsLockForGroup :one
-- Locks the account row of a posting group and returns its balance. The group decides which of its
-- no-overdraw members fit against this balance, and nothing else can move it before the group commits.
-- NO KEY UPDATE is the lock the balance update takes anyway: it leaves other transactions' foreign-key
-- checks on the account (their entries' inserts) free to proceed. Returns no row when the account does
-- not exist.
SELECT balance
FROM accounts
WHERE id = @id
FOR NO KEY UPDATE;
