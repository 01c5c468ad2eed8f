-- name: LedgerEntryInsert :one
-- Appends an entry. With a dedupe key, an entry is inserted at most once (ledger_dedupe_idx): when the
-- key was already posted it returns no row, which means "already done", never an error. A concurrent
-- insert of the same key waits for the first transaction and then returns no row (or inserts, if the
-- first rolled back).
INSERT INTO ledger (account_id, kind, amount, description, dedupe_key, payment_intent)
VALUES (@account_id, @kind, @amount, @description, sqlc.narg(dedupe_key), sqlc.narg(payment_intent))
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id, created_at;

-- name: LedgerEntryGetByDedupeKey :one
-- The entry posted under a dedupe key, to tell an exact replay from a key reused with other
-- parameters. Returns no row when the key was never posted.
SELECT id, account_id, kind, amount, description, dedupe_key, payment_intent, created_at
FROM ledger
WHERE dedupe_key = @dedupe_key::text;

-- name: LedgerEntriesByAccount :many
-- An account's entries, newest first. Keyset pagination on id (pass the last id seen as before_id):
-- stable while new entries are inserted, since ids only grow.
SELECT id, account_id, kind, amount, description, dedupe_key, payment_intent, created_at
FROM ledger
WHERE account_id = @account_id
  AND (sqlc.narg(before_id)::bigint IS NULL OR id < sqlc.narg(before_id)::bigint)
ORDER BY id DESC
LIMIT @max_rows;

-- name: LedgerDuplicateDedupeKeys :many
-- Dedupe keys held by more than one entry (verify). ledger_dedupe_idx makes this empty; verify still
-- asks, so that a dropped or invalid index is noticed.
SELECT dedupe_key::text AS dedupe_key, count(*) AS entries
FROM ledger
WHERE dedupe_key IS NOT NULL
GROUP BY dedupe_key
HAVING count(*) > 1
ORDER BY dedupe_key;

-- name: LedgerOverReversedPayments :many
-- Stripe payments whose net reversals (refunds and disputes, less restores and won disputes) exceed
-- what was credited for them (verify). Empty when the invariant holds.
SELECT payment_intent::text AS payment_intent,
       coalesce(sum(amount) FILTER (WHERE kind = 'topup'), 0)::bigint AS credited,
       (-coalesce(sum(amount) FILTER (WHERE kind IN ('refund', 'refund_restore', 'dispute', 'dispute_won')), 0))::bigint
           AS net_reversed
FROM ledger
WHERE payment_intent IS NOT NULL
GROUP BY payment_intent
HAVING -coalesce(sum(amount) FILTER (WHERE kind IN ('refund', 'refund_restore', 'dispute', 'dispute_won')), 0)
       > coalesce(sum(amount) FILTER (WHERE kind = 'topup'), 0)
ORDER BY payment_intent;

-- name: LedgerPresentIDs :many
-- Which of ids the ledger holds, as the caller's transaction sees it: a dry run keeps only the entries
-- its rolled-back transaction still holds (an effect that parks rolls its own postings back).
SELECT id
FROM ledger
WHERE id = ANY(@ids::bigint[]);

-- name: LedgerTimelineByAccount :many
-- An account's newest entries (at most max_rows), newest first, each with its account's balance right
-- after it: the running sum of the account's entries up to and including it, from the ledger itself
-- (not the cached balance), so a broken cache shows as a difference. A window sum over every entry of
-- the account (ledger_account_id_idx in id order), until entries record their balance_after.
SELECT id, kind, amount, description, dedupe_key, payment_intent, created_at, balance_after
FROM (
    SELECT id, kind, amount, description, dedupe_key, payment_intent, created_at,
           (sum(amount) OVER (ORDER BY id))::bigint AS balance_after
    FROM ledger
    WHERE account_id = @account_id
) timeline
ORDER BY id DESC
LIMIT @max_rows;

-- name: LedgerListByPaymentIntent :many
-- The entries of one Stripe payment (its credit, refunds, disputes and their restores) in posting
-- order, through ledger_payment_intent_idx.
SELECT id, account_id, kind, amount, description, dedupe_key, payment_intent, created_at
FROM ledger
WHERE payment_intent = @payment_intent::text
ORDER BY id
LIMIT @max_rows;
