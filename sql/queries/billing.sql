-- Usage billing: the reconciler bills decisions as usage entries keyed decision:{id}, a chunk of
-- thousands of decisions (by seq) per transaction. ledger_dedupe_idx, not a flag on decisions, makes
-- billing a decision at most once: re-reading any window of decisions posts nothing.
--
-- Per chunk, in one transaction: BillingChunkEnd finds the chunk, BillingChunkUnbilled names the
-- accounts with decisions still to bill, BillingAccountsLock locks them in id order, BillingChunkPost
-- inserts the entries and moves those balances.

-- name: BillingDecisionsLastSeq :one
-- The highest decision seq now visible: a pass stops there, so that a steady stream of new
-- decisions cannot keep it running forever (the next pass picks them up).
SELECT coalesce(max(seq), 0)::bigint AS last_seq
FROM decisions;

-- name: BillingChunkEnd :one
-- The seq that ends the chunk of at most chunk_size decisions after after_seq (up to last_seq), and
-- how many decisions it holds. Returns after_seq and 0 when there is none: the pass is over. Counting rows, not seq values, keeps
-- chunks full across the gaps identity columns leave (rolled-back and duplicate intakes).
SELECT coalesce(max(seq), @after_seq::bigint)::bigint AS upto_seq, count(*)::bigint AS decisions
FROM (
    SELECT seq
    FROM decisions
    WHERE seq > @after_seq::bigint
      AND seq <= @last_seq::bigint
    ORDER BY seq
    LIMIT @chunk_size::int
) chunk;

-- name: BillingChunkUnbilled :many
-- Per account, the decisions of the chunk (after_seq, upto_seq] not billed yet: how many, and the
-- lowest seq among them. Read-only; empty when the whole chunk was billed before, so re-reading a
-- billed chunk writes nothing. An account named here may not exist yet: BillingAccountsLock tells.
SELECT d.account_id, count(*)::bigint AS decisions, min(d.seq)::bigint AS first_seq
FROM decisions d
WHERE d.seq > @after_seq::bigint
  AND d.seq <= @upto_seq::bigint
  -- One probe of ledger_dedupe_idx per decision. Written as a scalar subquery, not NOT EXISTS, so
  -- that the planner cannot make it a hash anti-join that reads the whole ledger for every chunk.
  AND (SELECT l.id FROM ledger l WHERE l.dedupe_key = 'decision:' || d.id) IS NULL
GROUP BY d.account_id
ORDER BY d.account_id;

-- name: BillingAccountsLock :many
-- Locks the existing accounts among ids, in id order, before the chunk inserts anything: two
-- reconcilers (or any two billing transactions) take their account locks in the same order, so they
-- queue instead of deadlocking. FOR NO KEY UPDATE is the lock the balance update takes anyway; it
-- leaves other entries' foreign-key checks free. Accounts that do not exist are simply not returned.
SELECT id
FROM accounts
WHERE id = ANY(@ids::text[])
ORDER BY id
FOR NO KEY UPDATE;

-- name: BillingChunkPost :many
-- Bills the chunk (after_seq, upto_seq] in one statement: inserts a usage entry of -cost keyed
-- decision:{id} for each decision of a locked account (account_ids, from BillingAccountsLock), then
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
