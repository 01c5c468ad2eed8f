-- name: AccountInsert :one
-- Creates the account unless one with this id exists. Returns no row when it already existed:
-- the primary key, not a prior read, decides which of several concurrent creations wins.
INSERT INTO accounts (id, currency)
VALUES (@id, @currency)
ON CONFLICT (id) DO NOTHING
RETURNING id, currency, balance, created_at, held;

-- name: AccountGet :one
-- Returns no row when the account does not exist.
SELECT id, currency, balance, created_at, held
FROM accounts
WHERE id = @id;

-- name: AccountBalanceAdd :one
-- Moves the cached balance by amount, in the transaction that inserted the matching ledger entry.
-- Returns no row when the account does not exist.
UPDATE accounts
SET balance = balance + @amount
WHERE id = @id
RETURNING balance;

-- name: AccountBalanceAddNoOverdraw :one
-- Like AccountBalanceAdd, but refuses to take the balance below zero. The condition is evaluated on
-- the locked, current row (not on an earlier read), so concurrent debits can never overdraw together.
-- Returns no row when the account does not exist or the balance would go below zero.
UPDATE accounts
SET balance = balance + @amount
WHERE id = @id
  AND balance + @amount >= 0
RETURNING balance;

-- name: AccountHeldReserve :one
-- Reserves amount for a hold: held grows only while the available balance (balance - held) covers it.
-- The condition is evaluated on the locked, current row (not on an earlier read), so concurrent
-- authorisations can never reserve more than is available together. Returns no row when the account
-- does not exist or the available balance is short.
UPDATE accounts
SET held = held + @amount
WHERE id = @id
  AND balance - held >= @amount
RETURNING balance, held;

-- name: AccountHeldRelease :one
-- Releases a resolved hold's reservation, in the transaction that moved the hold out of held
-- (accounts_held_nonnegative_check refuses a release that was never reserved). Returns no row when
-- the account does not exist.
UPDATE accounts
SET held = held - @amount
WHERE id = @id
RETURNING balance, held;

-- name: AccountBalanceMismatches :many
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
