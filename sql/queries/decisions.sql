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

-- name: DecisionsWaitingForAccounts :many
-- Accounts that decisions name but that do not exist (yet): how many decisions wait for each, and
-- since when. The reconciler bills them once the account is created. Reads every decision (an
-- anti-join on accounts_pkey): for the operator console, not for a hot path.
SELECT d.account_id,
       count(*)::bigint AS decisions,
       min(d.received_at)::timestamptz AS oldest_received_at
FROM decisions d
WHERE NOT EXISTS (SELECT 1 FROM accounts a WHERE a.id = d.account_id)
GROUP BY d.account_id
ORDER BY decisions DESC, d.account_id
LIMIT @max_rows;

-- name: DecisionsBillingLag :one
-- Among the latest recent decisions (by seq), those whose account exists but that are not billed yet:
-- how many, and for how many seconds the oldest has waited, by the database's clock (0 when none):
-- how far billing lags. Bounded to the latest decisions so that it costs one probe of ledger_dedupe_idx per decision
-- looked at; an unbilled count equal to recent says the backlog may reach further back.
SELECT count(*)::bigint AS unbilled,
       coalesce(extract(epoch FROM now() - min(d.received_at)), 0)::float8 AS lag_seconds
FROM (
    SELECT id, account_id, received_at
    FROM decisions
    ORDER BY seq DESC
    LIMIT @recent::int
) d
WHERE EXISTS (SELECT 1 FROM accounts a WHERE a.id = d.account_id)
  -- A scalar subquery per decision, as in BillingChunkUnbilled: one index probe each.
  AND (SELECT l.id FROM ledger l WHERE l.dedupe_key = 'decision:' || d.id) IS NULL;
