-- name: DecisionsInsert :many
-- Stores a batch of decisions, the arrays read in lockstep; a decision id already stored is left as it
-- was (decisions_pkey). Returns the ids this call inserted: the others are duplicates or conflicts,
-- which the caller tells apart with DecisionsGet.
INSERT INTO decisions (id, account_id, cost, occurred_at, hold_id)
SELECT unnest(@ids::text[]),
       unnest(@account_ids::text[]),
       unnest(@costs::bigint[]),
       unnest(@occurred_ats::timestamptz[]),
       -- An empty hold id means none.
       nullif(unnest(@hold_ids::text[]), '')
ON CONFLICT (id) DO NOTHING
RETURNING id;

-- name: DecisionsGet :many
-- The stored decisions among ids, to compare a replayed batch with what was stored.
SELECT id, seq, account_id, cost, occurred_at, received_at, hold_id
FROM decisions
WHERE id = ANY(@ids::text[]);
