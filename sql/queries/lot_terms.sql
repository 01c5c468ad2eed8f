-- name: LotTermsInsert :exec
-- Stores the lot a credit asks for, under the credit's dedupe key, before the credit is posted:
-- ledger_lots reads it when it makes the lot. The first terms under a key stand (a replay changes
-- nothing); nothing is stored for an account that does not exist (the posting then says so).
INSERT INTO lot_terms (account_id, dedupe_key, category, priority, expires_at)
SELECT a.id, @dedupe_key, @category, @priority, sqlc.narg(expires_at)
FROM accounts a
WHERE a.id = @account_id
ON CONFLICT (account_id, dedupe_key) DO NOTHING;
