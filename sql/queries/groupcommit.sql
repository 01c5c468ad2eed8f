-- name: GroupCommitAccountLock :one
-- Locks the account row of a posting group and returns its balance. The group decides which of its
-- no-overdraw members fit against this balance, and nothing else can move it before the group commits.
-- NO KEY UPDATE is the lock the balance update takes anyway: it leaves other transactions' foreign-key
-- checks on the account (their entries' inserts) free to proceed. Returns no row when the account does
-- not exist.
SELECT balance
FROM accounts
WHERE id = @id
FOR NO KEY UPDATE;

-- name: GroupCommitEntriesByKeys :many
-- The entries already posted under any of a group's dedupe keys: those members are replays or
-- conflicts and are not inserted again. Keys never posted return nothing.
SELECT id, account_id, kind, amount, description, dedupe_key, payment_intent, created_at
FROM ledger
WHERE dedupe_key = ANY(@dedupe_keys::text[]);

-- name: GroupCommitEntriesInsert :many
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
