-- name: LedgerInsert :one
-- Appends an entry. With a dedupe key, an entry is inserted at most once (ledger_dedupe_idx): when the
-- key was already posted it returns no row, which means "already done", never an error. A concurrent
-- insert of the same key waits for the first transaction and then returns no row (or inserts, if the
-- first rolled back).
INSERT INTO ledger (account_id, kind, amount, description, dedupe_key, payment_intent)
VALUES (@account_id, @kind, @amount, @description, sqlc.narg(dedupe_key), sqlc.narg(payment_intent))
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id, created_at;

-- name: LedgerGetByDedupeKey :one
-- The entry posted under a dedupe key, to tell an exact replay from a key reused with other
-- parameters. Returns no row when the key was never posted.
SELECT id, account_id, kind, amount, description, dedupe_key, payment_intent, created_at
FROM ledger
WHERE dedupe_key = @dedupe_key::text;

-- name: LedgerListByAccount :many
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

-- name: LedgerListByDedupeKeys :many
-- The entries already posted under any of a group's dedupe keys: those members are replays or
-- conflicts and are not inserted again. Keys never posted return nothing.
SELECT id, account_id, kind, amount, description, dedupe_key, payment_intent, created_at
FROM ledger
WHERE dedupe_key = ANY(@dedupe_keys::text[]);

-- name: LedgerInsertGroup :many
-- Appends a group's admitted entries in one statement, the arrays read in lockstep (one element per
-- entry; an empty dedupe key or payment intent means none). ledger_dedupe_idx still holds: a key
-- posted meanwhile by another transaction inserts nothing and returns no row for it. Rows are inserted,
-- and ids drawn, in array order; ledger_kind_sign_check and ledger_account_fk fail the whole statement.
INSERT INTO ledger (account_id, kind, amount, description, dedupe_key, payment_intent)
SELECT unnest(@account_ids::text[]),
       unnest(@kinds::text[]),
       unnest(@amounts::bigint[]),
       unnest(@descriptions::text[]),
       nullif(unnest(@dedupe_keys::text[]), ''),
       nullif(unnest(@payment_intents::text[]), '')
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id, dedupe_key, created_at;

-- Usage billing: the reconciler bills decisions as usage entries keyed decision:{id}, a chunk of
-- thousands of decisions (by seq) per transaction. ledger_dedupe_idx, not a flag on decisions, makes
-- billing a decision at most once: re-reading any window of decisions posts nothing.
--
-- Per chunk, in one transaction: DecisionsChunkEnd finds the chunk, DecisionsUnbilledByAccount names
-- the accounts with decisions still to bill, AccountsLockForBilling locks them in id order,
-- LedgerUsageInsertForDecisions inserts the entries and moves those balances.

-- name: LedgerUsageInsertForDecisions :many
-- Bills the chunk (after_seq, upto_seq] in one statement: inserts a usage entry of -cost keyed
-- decision:{id} for each decision of a locked account (account_ids, from AccountsLockForBilling), then
-- moves each account's balance once, by the sum of what was actually inserted. A decision already
-- billed hits ledger_dedupe_idx and inserts nothing (ON CONFLICT DO NOTHING), so it moves no balance;
-- if another transaction is billing it right now, the insert waits for that one to finish first.
-- Only locked accounts are billed, so the balance update never takes a lock out of order. Returns
-- the entries inserted, each with its account's balance after the chunk.
WITH inserted AS (
    INSERT INTO ledger (account_id, kind, amount, description, dedupe_key)
    SELECT d.account_id, 'usage', -d.cost, 'decision ' || d.id, 'decision:' || d.id
    FROM decisions d
    -- A join (hashed), not account_id = ANY(...), which is a linear search per row in a generic plan.
    JOIN unnest(@account_ids::text[]) AS locked (account_id) ON locked.account_id = d.account_id
    WHERE d.seq > @after_seq::bigint
      AND d.seq <= @upto_seq::bigint
    ORDER BY d.seq
    ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
    RETURNING id, account_id, amount, description, dedupe_key, created_at
), per_account AS (
    SELECT account_id, sum(amount)::bigint AS total
    FROM inserted
    GROUP BY account_id
), updated AS (
    UPDATE accounts a
    SET balance = a.balance + p.total
    FROM per_account p
    WHERE a.id = p.account_id
    RETURNING a.id, a.balance
)
SELECT i.id, i.account_id, i.amount, i.description, i.dedupe_key::text AS dedupe_key, i.created_at,
       u.balance
FROM inserted i
JOIN updated u ON u.id = i.account_id
ORDER BY i.id;

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
