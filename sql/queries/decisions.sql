-- name: DecisionsInsert :many
-- Stores a batch of decisions; a decision id already stored is left as it was (decisions_pkey).
-- Returns the ids this call inserted: the others are duplicates or conflicts, which the caller tells
-- apart with DecisionsGet.
INSERT INTO decisions (id, account_id, cost, occurred_at)
SELECT unnest(@ids::text[]),
       unnest(@account_ids::text[]),
       unnest(@costs::bigint[]),
       unnest(@occurred_ats::timestamptz[])
ON CONFLICT (id) DO NOTHING
RETURNING id;

-- name: DecisionsGet :many
-- The stored decisions among ids, to compare a replayed batch with what was stored.
SELECT id, seq, account_id, cost, occurred_at, received_at
FROM decisions
WHERE id = ANY(@ids::text[]);
