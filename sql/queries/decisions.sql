-- name: DecisionsInsert :many
-- Stores a batch of decisions, the arrays read in lockstep; a decision id already stored is left as it
-- was (decisions_pkey; on Citus, where that key is per account, an id is also claimed across accounts,
-- claim_keys, as decisions:{id}). Returns the ids this call inserted: the others are duplicates or
-- conflicts, which the caller tells apart with DecisionsGet.
WITH batch AS (
    SELECT (@ids::text[])[i] AS id, (@account_ids::text[])[i] AS account_id, (@costs::bigint[])[i] AS cost,
           (@occurred_ats::timestamptz[])[i] AS occurred_at,
           -- An empty hold id, subject or feature means none.
           nullif((@hold_ids::text[])[i], '') AS hold_id,
           nullif((@subjects::text[])[i], '') AS subject,
           nullif((@features::text[])[i], '') AS feature
    FROM generate_subscripts(@ids::text[], 1) AS i
), claimed AS (
    SELECT c.key FROM claim_keys(ARRAY(SELECT 'decisions:' || id FROM batch), ARRAY(SELECT account_id FROM batch)) AS c (key)
)
INSERT INTO decisions (id, account_id, cost, occurred_at, hold_id, subject, feature)
SELECT b.id, b.account_id, b.cost, b.occurred_at, b.hold_id, b.subject, b.feature
FROM batch b
WHERE 'decisions:' || b.id IN (SELECT key FROM claimed)
ON CONFLICT ON CONSTRAINT decisions_pkey DO NOTHING
RETURNING id;

-- name: DecisionsGet :many
-- The stored decisions among ids, to compare a replayed batch with what was stored.
SELECT id, seq, account_id, cost, occurred_at, received_at, hold_id, subject, feature
FROM decisions
WHERE id = ANY(@ids::text[]);

-- name: DecisionsLastSeq :one
-- The highest decision seq now visible: a pass stops there, so that a steady stream of new
-- decisions cannot keep it running forever (the next pass picks them up).
SELECT coalesce(max(seq), 0)::bigint AS last_seq
FROM decisions;

-- name: DecisionsChunkEnd :one
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

-- name: DecisionsUnbilledByAccount :many
-- Per account, the decisions of the chunk (after_seq, upto_seq] not billed yet: how many, and the
-- lowest seq among them. Read-only; empty when the whole chunk was billed before, so re-reading a
-- billed chunk writes nothing. An account named here may not exist yet: AccountsLockForBilling
-- tells.
SELECT d.account_id, count(*)::bigint AS decisions, min(d.seq)::bigint AS first_seq
FROM decisions d
WHERE d.seq > @after_seq::bigint
  AND d.seq <= @upto_seq::bigint
  -- One probe of ledger_dedupe_idx per decision. Written as a scalar subquery, not NOT EXISTS, so
  -- that the planner cannot make it a hash anti-join that reads the whole ledger for every chunk.
  AND (SELECT l.id FROM ledger l WHERE l.account_id = d.account_id AND l.dedupe_key = 'decision:' || d.id) IS NULL
GROUP BY d.account_id
ORDER BY d.account_id;

-- name: DecisionsUnbillableAccounts :many
-- The existing accounts whose unbilled decisions with seq in (after_seq, upto_seq] cannot be billed
-- because their sum, or the balance less that sum, would leave a bigint (numeric_value_out_of_range).
-- Billing leaves those accounts out, so that one account cannot stop the others' billing; verify
-- reports them (the whole seq range). Sums are numeric and cannot overflow here. Returns, per
-- account, how many decisions wait, their total cost and the lowest seq among them.
SELECT d.account_id, count(*)::bigint AS decisions, sum(d.cost::numeric)::text AS total_cost,
       min(d.seq)::bigint AS first_seq
FROM decisions d
JOIN accounts a ON a.id = d.account_id
WHERE d.seq > @after_seq::bigint
  AND d.seq <= @upto_seq::bigint
  -- One probe of ledger_dedupe_idx per decision, as DecisionsUnbilledByAccount.
  AND (SELECT l.id FROM ledger l WHERE l.account_id = d.account_id AND l.dedupe_key = 'decision:' || d.id) IS NULL
GROUP BY d.account_id, a.balance
HAVING least(-sum(d.cost::numeric), a.balance - sum(d.cost::numeric)) < -9223372036854775808
ORDER BY d.account_id;

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
-- how far billing lags. The latest are found first (a subquery with a limit, planned on its own), then
-- joined back to their rows and probed (one probe of the ledger's dedupe index each, on the decision's
-- own account: colocated on Citus); an unbilled count equal to recent says the backlog may reach further
-- back.
WITH latest AS (
    SELECT id, account_id
    FROM decisions
    ORDER BY seq DESC
    LIMIT @recent::int
)
SELECT count(*)::bigint AS unbilled,
       coalesce(extract(epoch FROM now() - min(d.received_at)), 0)::float8 AS lag_seconds
FROM decisions d
JOIN latest ON latest.account_id = d.account_id AND latest.id = d.id
JOIN accounts a ON a.id = d.account_id
WHERE (SELECT l.id FROM ledger l WHERE l.account_id = d.account_id AND l.dedupe_key = 'decision:' || d.id) IS NULL;
