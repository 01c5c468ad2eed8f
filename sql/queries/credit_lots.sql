-- Credit lots (SPEC §12). Lots are made and drawn by the trigger ledger_lots; these queries read them
-- and post the entries that end them (expiry and void), which the trigger then applies.

-- name: CreditLotsListByAccount :many
-- An account's lots in draw order (priority, expires_at nulls last, promotional before paid, id): the
-- lots with something left, or every lot with every.
SELECT id, account_id, entry_id, category, priority, amount, remaining, expires_at, created_at, closed_at
FROM credit_lots
WHERE account_id = @account_id
  AND (@every::boolean OR (closed_at IS NULL AND remaining > 0))
ORDER BY priority, expires_at NULLS LAST, category = 'paid', id
LIMIT @max_rows;

-- name: CreditLotsGet :one
-- A lot by its id alone (credit_lots_id_idx). Returns no row when there is none.
SELECT id, account_id, entry_id, category, priority, amount, remaining, expires_at, created_at, closed_at
FROM credit_lots
WHERE id = @id;

-- name: CreditLotsGetOfAccount :one
-- A lot of a known account (credit_lots_pkey): on Citus one shard, where CreditLotsGet asks every one.
-- Returns no row when the account has no such lot.
SELECT id, account_id, entry_id, category, priority, amount, remaining, expires_at, created_at, closed_at
FROM credit_lots
WHERE account_id = @account_id AND id = @id;

-- name: CreditLotsClose :one
-- Closes an open lot with nothing left (voided or expired empty: no entry to post). Returns no row when
-- it was closed already or still holds credit.
UPDATE credit_lots
SET closed_at = now()
WHERE account_id = @account_id AND id = @id AND closed_at IS NULL AND remaining = 0
RETURNING id, account_id, entry_id, category, priority, amount, remaining, expires_at, created_at, closed_at;

-- name: CreditLotsExpiringAccounts :many
-- The accounts holding an open lot past its expiry on the database clock (credit_lots_expires_idx), at
-- most max_rows, in id order: the expiry pass locks them before reading their lots.
SELECT DISTINCT account_id
FROM credit_lots
WHERE closed_at IS NULL AND expires_at <= now()
ORDER BY account_id
LIMIT @max_rows;

-- name: CreditLotsCloseExpiredEmpty :execrows
-- Closes the locked accounts' open lots past their expiry with nothing left: no entry to post.
UPDATE credit_lots
SET closed_at = now()
WHERE account_id = ANY(@account_ids::text[])
  AND closed_at IS NULL AND expires_at <= now() AND remaining = 0;

-- name: CreditLotsRemainingMismatches :many
-- Lots whose remaining is not amount - their draws + their refills, or that are closed with something
-- left (verify). Empty when the invariant holds.
SELECT l.account_id, l.id, l.amount, l.remaining,
       coalesce(d.drawn, 0)::bigint AS drawn, coalesce(r.refilled, 0)::bigint AS refilled,
       l.closed_at IS NOT NULL AS closed
FROM credit_lots l
LEFT JOIN (SELECT account_id, lot_id, sum(amount) AS drawn FROM lot_draws GROUP BY account_id, lot_id) d
    ON d.account_id = l.account_id AND d.lot_id = l.id
LEFT JOIN (SELECT account_id, lot_id, sum(amount) AS refilled FROM lot_refills GROUP BY account_id, lot_id) r
    ON r.account_id = l.account_id AND r.lot_id = l.id
WHERE l.remaining <> l.amount - coalesce(d.drawn, 0) + coalesce(r.refilled, 0)
   OR (l.closed_at IS NOT NULL AND l.remaining <> 0)
ORDER BY l.account_id, l.id
LIMIT 1000;

-- name: CreditLotsBalanceMismatches :many
-- Accounts whose balance (their last entry's balance_after, read backwards on ledger_account_seq_key:
-- the cached accounts.balance has a check of its own) is not the sum of their open lots' remaining less
-- their debt (lot_debts), or that hold both debt and open credit (verify). Empty when the invariant
-- holds.
SELECT b.id, b.balance, b.open_remaining, b.debt
FROM (
    SELECT a.id,
           coalesce((SELECT e.balance_after FROM ledger e WHERE e.account_id = a.id ORDER BY e.seq DESC LIMIT 1), 0)::bigint
               AS balance,
           coalesce(l.open, 0)::bigint AS open_remaining, coalesce(d.debt, 0)::bigint AS debt
    FROM accounts a
    LEFT JOIN (
        SELECT account_id, sum(remaining) AS open FROM credit_lots WHERE closed_at IS NULL GROUP BY account_id
    ) l ON l.account_id = a.id
    LEFT JOIN (SELECT account_id, sum(uncovered) AS debt FROM lot_debts GROUP BY account_id) d ON d.account_id = a.id
) b
WHERE b.balance <> b.open_remaining - b.debt
   OR (b.open_remaining > 0 AND b.debt > 0)
ORDER BY b.id
LIMIT 1000;

-- name: CreditLotsOverdue :many
-- Open lots past their expiry by more than grace (verify): the expiry pass is not keeping up.
SELECT account_id, id, remaining, expires_at::timestamptz AS expires_at
FROM credit_lots
WHERE closed_at IS NULL AND expires_at < now() - make_interval(secs => @grace_seconds::float8)
ORDER BY expires_at
LIMIT 1000;
