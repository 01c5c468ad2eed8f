-- name: AccountsInsert :one
-- Creates the account unless one with this id exists, as a member of parent_id when it is not ''.
-- Returns no row when it already existed: the primary key, not a prior read, decides which of several
-- concurrent creations wins. unit is currency or credits (accounts_unit_check). A parent that does not
-- exist fails with accounts_parent_fk, one of another currency with accounts_parent_currency_check, one
-- too deep with accounts_depth_check (trigger accounts_parent_tree).
INSERT INTO accounts (id, currency, unit, parent_id)
VALUES (@id, @currency, @unit, nullif(@parent_id::text, ''))
ON CONFLICT (id) DO NOTHING
RETURNING id, currency, balance, created_at, held, unit, coalesce(parent_id, '')::text AS parent_id;

-- name: AccountsGet :one
-- Returns no row when the account does not exist.
SELECT id, currency, balance, created_at, held, unit, coalesce(parent_id, '')::text AS parent_id
FROM accounts
WHERE id = @id;

-- name: AccountsHeldRelease :one
-- Releases a resolved hold's reservation, in the transaction that moved the hold out of held
-- (accounts_held_nonnegative_check refuses a release that was never reserved). Returns no row when
-- the account does not exist.
UPDATE accounts
SET held = held - @amount
WHERE id = @id
RETURNING balance, held;

-- name: AccountsBalanceMismatches :many
-- Accounts whose cached balance differs from the sum of their ledger entries, from the balance_after
-- of their last entry (by seq), or whose last_seq is not that entry's seq (verify). Empty when the
-- invariants hold.
SELECT a.id, a.balance AS cached, coalesce(l.total, 0)::bigint AS ledger_sum,
       coalesce(l.last_balance_after, 0)::bigint AS last_balance_after,
       a.last_seq, coalesce(l.last_seq, 0)::bigint AS ledger_last_seq
FROM accounts a
LEFT JOIN (
    SELECT account_id, sum(amount) AS total, max(seq) AS last_seq,
           (array_agg(balance_after ORDER BY seq DESC))[1] AS last_balance_after
    FROM ledger
    GROUP BY account_id
) l ON l.account_id = a.id
WHERE a.balance <> coalesce(l.total, 0)
   OR a.balance <> coalesce(l.last_balance_after, 0)
   OR a.last_seq <> coalesce(l.last_seq, 0)
ORDER BY a.id;

-- name: AccountsLock :many
-- Locks the existing accounts among ids in id order (accounts_lock), before anything of theirs is
-- written: billing, the expiry passes, a posting group, a hold's authorisation or resolution. Every path
-- takes its account locks in this one order, so they queue instead of deadlocking. Returns each account
-- locked with what planning needs (last_seq, balance, held); an account that does not exist is not
-- returned.
SELECT l.id::text AS id, l.last_seq::bigint AS last_seq, l.balance::bigint AS balance, l.held::bigint AS held
FROM accounts_lock(@ids::text[]) AS l (id, last_seq, balance, held);

-- name: AccountsGetAutomation :one
-- An account's saved card, auto-recharge and alert settings (GET /v1/accounts/{id}, the recharge job).
-- Returns no row when the account does not exist.
SELECT stripe_customer, payment_method, recharge_enabled, recharge_threshold, recharge_amount,
       recharge_failures, low_balance_alert, recharge_budget_amount, recharge_budget_count,
       recharge_budget_period, recharge_cooldown, recharge_mode, recharge_target, recharge_stopped
FROM accounts
WHERE id = @id;

-- name: AccountsSetRecharge :one
-- Sets auto-recharge. Enabling needs a saved card: the condition is on the locked row, so a card
-- recorded concurrently counts and none is never enabled (accounts_recharge_enabled_check holds it
-- too). Enabling forgives earlier failures and clears why recharge stopped; enabling what the failure
-- ladder stopped starts a new episode, so the next dip makes a first attempt even where the stopped
-- episode made its tries.
-- What a budget window counted stays. Returns no row when the account does not exist or has no saved
-- card while enabling.
UPDATE accounts
SET recharge_enabled = @enabled,
    recharge_threshold = @threshold,
    recharge_amount = @amount,
    recharge_budget_amount = sqlc.narg(budget_amount),
    recharge_budget_count = sqlc.narg(budget_count),
    recharge_budget_period = sqlc.narg(budget_period),
    recharge_cooldown = @cooldown,
    recharge_mode = @mode,
    recharge_target = sqlc.narg(target),
    recharge_failures = CASE WHEN @enabled::boolean THEN 0 ELSE recharge_failures END,
    recharge_stopped = CASE WHEN @enabled::boolean THEN NULL ELSE recharge_stopped END,
    recharge_episode = recharge_episode + CASE WHEN @enabled::boolean AND recharge_stopped IS NOT NULL THEN 1 ELSE 0 END,
    recharge_retry = CASE WHEN @enabled::boolean AND recharge_stopped IS NOT NULL THEN 0 ELSE recharge_retry END
WHERE id = @id
  AND (NOT @enabled::boolean OR (stripe_customer IS NOT NULL AND payment_method IS NOT NULL))
RETURNING stripe_customer, payment_method, recharge_enabled, recharge_threshold, recharge_amount,
          recharge_failures, low_balance_alert, recharge_budget_amount, recharge_budget_count,
          recharge_budget_period, recharge_cooldown, recharge_mode, recharge_target, recharge_stopped;

-- name: AccountsSetAlerts :one
-- Sets (or, with NULL, clears) the low-balance alert threshold. Returns no row when the account does
-- not exist.
UPDATE accounts
SET low_balance_alert = sqlc.narg(low_balance_alert)
WHERE id = @id
RETURNING stripe_customer, payment_method, recharge_enabled, recharge_threshold, recharge_amount,
          recharge_failures, low_balance_alert, recharge_budget_amount, recharge_budget_count,
          recharge_budget_period, recharge_cooldown, recharge_mode, recharge_target, recharge_stopped;

-- name: AccountsSetStripeCustomer :execrows
-- Records the Stripe customer that saves the account's card, unless it has one: the API creates one
-- customer per account (Stripe idempotency key customer:{account_id}), and the completed session names
-- it again.
UPDATE accounts
SET stripe_customer = @stripe_customer
WHERE id = @id
  AND stripe_customer IS NULL;

-- name: AccountsSetPaymentMethod :execrows
-- Records the card saved for off-session use, when it belongs to the account's customer.
UPDATE accounts
SET payment_method = @payment_method
WHERE id = @id
  AND stripe_customer = @stripe_customer
  AND payment_method IS DISTINCT FROM @payment_method;

-- name: AccountsRechargeFailed :one
-- Counts a failed attempt of an account with recharge on. A hard decline forgets the card and stops
-- recharge at once (payment_method_required); the third failure in a row stops it
-- (disabled_after_failures). The SET reads the locked row, so concurrent failures count one by one.
-- Returns no row when recharge was already off (nothing to count).
UPDATE accounts
SET recharge_failures = least(recharge_failures + 1, 3),
    recharge_enabled = NOT @hard::boolean AND recharge_failures + 1 < 3,
    recharge_stopped = CASE
        WHEN @hard::boolean THEN 'payment_method_required'
        WHEN recharge_failures + 1 >= 3 THEN 'disabled_after_failures'
    END,
    payment_method = CASE WHEN @hard::boolean THEN NULL ELSE payment_method END
WHERE id = @id
  AND recharge_enabled
RETURNING recharge_failures, recharge_enabled, recharge_stopped;

-- name: AccountsRechargeRetry :execrows
-- Opens the next try of the episode (the failure ladder's job): raising recharge_retry queues
-- accounts_available_watch, which makes the retry at commit if available is still below the threshold,
-- under the same budget and cooldown as any attempt. Returns 0 rows when recharge is off, the episode
-- ended, or the try was opened already (a job run twice opens it once).
UPDATE accounts
SET recharge_retry = recharge_retry + 1
WHERE id = @id
  AND recharge_enabled
  AND recharge_episode = @episode
  AND recharge_retry = @retry
  AND recharge_retry < 3;

-- name: AccountsRechargeSucceeded :exec
-- A paid attempt ends the run of failures.
UPDATE accounts
SET recharge_failures = 0
WHERE id = @id
  AND recharge_failures <> 0;

-- name: AccountsParents :many
-- The accounts among ids that exist, each with its parent ('' for a root) and depth: a cascade reads its
-- members' pools with this, a level at a time (at most three), before it locks them all (AccountsLock).
SELECT id, coalesce(parent_id, '')::text AS parent_id, depth::int AS depth
FROM accounts
WHERE id = ANY(@ids::text[]);

-- name: AccountsMembers :many
-- The members of a pool (its children), each with its balance, held and what it spent itself this month
-- (UTC, on the database clock): the usage entries on its own account. Empty when the account has none.
SELECT c.id, c.balance, c.held,
       coalesce((SELECT -sum(l.amount) FROM ledger l
                 WHERE l.account_id = c.id AND l.kind = 'usage'
                   AND l.created_at >= date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'), 0)::bigint
           AS spent_own
FROM accounts c
WHERE c.parent_id = @id::text
ORDER BY c.id;

-- name: LedgerDrawnByMembers :many
-- What a pool paid on behalf of each member this month (UTC, on the database clock): its entries with
-- on_behalf_of, by member.
SELECT l.on_behalf_of::text AS member, (-sum(l.amount))::bigint AS drawn
FROM ledger l
WHERE l.account_id = @pool_id
  AND l.on_behalf_of IS NOT NULL
  AND l.created_at >= date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
GROUP BY l.on_behalf_of
ORDER BY 1;
