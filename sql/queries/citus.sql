-- Postings on Citus (SPEC §15, sql/citus/prepare.sql), chosen at run time when the database was
-- distributed (db/citus_ledger.go). Citus runs no INSERT ... SELECT ... FOR UPDATE and no ON CONFLICT on
-- a unique key without the distribution column: a posting locks its account row first, claims its key
-- in dedupe_claims, then inserts with the locked row's last_seq and balance; ledger_chain (on the shard)
-- checks the chain and moves the account, as on plain PostgreSQL.

-- name: CitusAccountsLock :one
-- Locks an account row (FOR NO KEY UPDATE, a router query to its shard) before its entries are numbered
-- from it. Returns no row when the account does not exist.
SELECT balance, last_seq
FROM accounts
WHERE id = @id
FOR NO KEY UPDATE;

-- name: CitusDedupeClaimsInsert :one
-- Claims a dedupe key for an account's entry, in the posting's transaction (dedupe_claims_pkey). Returns
-- no row when the key is claimed already: posted before, or by a concurrent transaction this one waited
-- for until it committed.
INSERT INTO dedupe_claims (dedupe_key, account_id)
VALUES (@dedupe_key, @account_id)
ON CONFLICT (dedupe_key) DO NOTHING
RETURNING dedupe_key;

-- name: CitusDedupeClaimsGet :one
-- The account whose entry holds a claimed key. Returns no row when the key was never posted.
SELECT account_id
FROM dedupe_claims
WHERE dedupe_key = @dedupe_key;

-- name: CitusLedgerGetByAccountDedupeKey :one
-- The entry of an account posted under a dedupe key (ledger_account_dedupe_idx, one shard).
SELECT id, account_id, kind, amount, description, dedupe_key, payment_intent, created_at, seq, balance_after
FROM ledger
WHERE account_id = @account_id
  AND dedupe_key = @dedupe_key::text;

-- name: CitusLedgerInsert :one
-- Appends an entry numbered from its locked account row (CitusAccountsLock): seq = last_seq + 1,
-- balance_after = balance + amount; ledger_chain refuses it unless that is still the account's state, and
-- moves the account. A balance beyond a bigint fails with numeric_value_out_of_range.
INSERT INTO ledger (account_id, kind, amount, description, dedupe_key, payment_intent, seq, balance_after)
SELECT @account_id, @kind, @amount::bigint, @description, sqlc.narg(dedupe_key), sqlc.narg(payment_intent),
       sqlc.arg(last_seq)::bigint + 1, sqlc.arg(balance)::bigint + sqlc.arg(amount)::bigint
RETURNING id, seq, balance_after, created_at;

-- name: CitusDecisionsUnbilledByAccount :many
-- DecisionsUnbilledByAccount on Citus: the probe for a decision's entry is on its own account's shard
-- (ledger_account_dedupe_idx), a colocated join.
SELECT d.account_id, count(*)::bigint AS decisions, min(d.seq)::bigint AS first_seq
FROM decisions d
WHERE d.seq > @after_seq::bigint
  AND d.seq <= @upto_seq::bigint
  AND NOT EXISTS (SELECT 1 FROM ledger l WHERE l.account_id = d.account_id AND l.dedupe_key = 'decision:' || d.id)
GROUP BY d.account_id
ORDER BY d.account_id;

-- name: CitusDedupeClaimsForDecisions :many
-- Claims decision:{id} for each decision of the chunk (after_seq, upto_seq] of the locked accounts
-- (account_ids), in one statement; the keys returned, with their accounts, are the decisions to bill now,
-- the others were billed before (or their id was billed for another account, and is never billed twice).
INSERT INTO dedupe_claims (dedupe_key, account_id)
SELECT 'decision:' || d.id, d.account_id
FROM decisions d
WHERE d.account_id = ANY(@account_ids::text[])
  AND d.seq > @after_seq::bigint
  AND d.seq <= @upto_seq::bigint
ON CONFLICT (dedupe_key) DO NOTHING
RETURNING dedupe_key, account_id;

-- name: CitusLedgerUsageInsertForAccount :many
-- Bills one locked account's claimed decisions of the chunk in one statement on its shard: usage entries
-- of -cost keyed decision:{id}, in decision seq order, numbered from last_seq + 1 with balance_after =
-- balance - the running sum of costs; ledger_chain moves the account entry by entry. A balance beyond a
-- bigint fails with numeric_value_out_of_range.
INSERT INTO ledger (account_id, kind, amount, description, dedupe_key, seq, balance_after)
SELECT d.account_id, 'usage', -d.cost, 'decision ' || d.id, 'decision:' || d.id,
       a.last_seq + row_number() OVER w,
       (a.balance - sum(d.cost::numeric) OVER w)::bigint
FROM decisions d
JOIN accounts a ON a.id = d.account_id
WHERE d.account_id = @account_id
  AND a.id = @account_id
  AND d.seq > @after_seq::bigint
  AND d.seq <= @upto_seq::bigint
  AND 'decision:' || d.id = ANY(@claimed::text[])
WINDOW w AS (ORDER BY d.seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
ORDER BY d.seq
RETURNING id, account_id, amount, description, dedupe_key::text AS dedupe_key, seq, balance_after, created_at;

-- name: CitusTopupsInsertForSession :exec
-- TopupsInsertForSession on Citus, where topups_session_id_key is (account_id, session_id): a session
-- names its account in its metadata, so its order is found on that account's shard.
INSERT INTO topups (id, account_id, session_id, amount, currency)
VALUES (@id, @account_id, @session_id, @amount, @currency)
ON CONFLICT (account_id, session_id) DO NOTHING;

-- name: CitusAccountsLockOne :one
-- AccountsLockForBilling on Citus, one account at a time (Citus locks rows only in single-shard
-- queries); the caller takes them in id order. Returns no row when the account does not exist.
SELECT id
FROM accounts
WHERE id = @id
FOR NO KEY UPDATE;

-- name: CitusStripeEventsParkedIDsForPayment :many
-- The events parked as unknown_payment for a payment, in arrival order, unlocked (Citus locks rows only in
-- single-shard queries): CitusStripeEventsLockParked then locks each on its shard.
SELECT event_id
FROM stripe_events
WHERE outcome = 'parked'
  AND parked_reason = 'unknown_payment'
  AND payment_intent = @payment_intent::text
ORDER BY seq;

-- name: CitusStripeEventsLockParked :one
-- Locks one event still parked as unknown_payment (SKIP LOCKED: one being replayed right now is passed
-- over). Returns no row when it is locked or no longer parked so.
SELECT event_id, payload
FROM stripe_events
WHERE event_id = @event_id
  AND outcome = 'parked'
  AND parked_reason = 'unknown_payment'
FOR UPDATE SKIP LOCKED;

-- name: CitusDecisionsUnbillableAccounts :many
-- DecisionsUnbillableAccounts on Citus: the probe for a decision's entry is on its own account's shard.
SELECT d.account_id, count(*)::bigint AS decisions, sum(d.cost::numeric)::text AS total_cost,
       min(d.seq)::bigint AS first_seq
FROM decisions d
JOIN accounts a ON a.id = d.account_id
WHERE d.seq > @after_seq::bigint
  AND d.seq <= @upto_seq::bigint
  AND NOT EXISTS (SELECT 1 FROM ledger l WHERE l.account_id = d.account_id AND l.dedupe_key = 'decision:' || d.id)
GROUP BY d.account_id, a.balance
HAVING least(-sum(d.cost::numeric), a.balance - sum(d.cost::numeric)) < -9223372036854775808
ORDER BY d.account_id;

-- name: CitusDecisionsBillingLag :one
-- DecisionsBillingLag on Citus: the latest decisions are found first (a subquery with a limit, planned on
-- its own), then probed on their own shards (colocated joins on the account).
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
WHERE NOT EXISTS (SELECT 1 FROM ledger l WHERE l.account_id = d.account_id AND l.dedupe_key = 'decision:' || d.id);

-- name: CitusTopupsAccountOfSession :one
-- The account of a session's order, read across shards without locking (a multi-shard UPDATE would lock
-- every shard of topups and queue every other one behind it). Returns no row when the session has no order.
SELECT account_id
FROM topups
WHERE session_id = @session_id
ORDER BY account_id
LIMIT 1;

-- name: CitusTopupsMarkPaid :one
-- TopupsMarkPaid on the order's own shard (CitusTopupsAccountOfSession names it): the pending -> paid
-- transition, at most once per order, by the same conditional UPDATE.
UPDATE topups
SET status = 'paid', payment_intent = sqlc.narg(payment_intent), paid_event_id = @paid_event_id, paid_at = now()
WHERE account_id = @account_id
  AND session_id = @session_id
  AND status = 'pending'
RETURNING id, account_id, session_id, payment_intent, amount, currency, status, checkout_url, paid_event_id, created_at, paid_at,
          idempotency_key, request_fingerprint;

-- name: CitusDedupeClaimsForExpiries :many
-- CreditLotsExpire on Citus, first step: claims expire:{lot_id} for every open lot past its expiry with
-- something left of the locked accounts (account_ids), in one statement; the keys returned, with their
-- accounts, are the expiries to post now.
INSERT INTO dedupe_claims (dedupe_key, account_id)
SELECT 'expire:' || l.id, l.account_id
FROM credit_lots l
WHERE l.account_id = ANY(@account_ids::text[])
  AND l.closed_at IS NULL AND l.expires_at <= now() AND l.remaining > 0
ON CONFLICT (dedupe_key) DO NOTHING
RETURNING dedupe_key, account_id;

-- name: CitusCreditLotsExpireForAccount :many
-- CreditLotsExpire on Citus, per locked account on its shard: an expiry entry of -remaining for each lot
-- whose key it claimed (CitusDedupeClaimsForExpiries, under the account's lock, so the lots are still
-- open and remaining is exact), chained from its last_seq and balance in lot id order; ledger_lots takes
-- each lot's remaining and closes it.
WITH due AS (
    SELECT l.account_id, l.id, l.remaining,
           row_number() OVER w AS k,
           sum(l.remaining) OVER w AS taken
    FROM credit_lots l
    WHERE l.account_id = @account_id
      AND 'expire:' || l.id = ANY(@claimed::text[])
    WINDOW w AS (ORDER BY l.id ROWS UNBOUNDED PRECEDING)
)
INSERT INTO ledger (account_id, kind, amount, description, dedupe_key, seq, balance_after)
SELECT a.id, 'expiry', -d.remaining, 'lot ' || d.id || ' expired', 'expire:' || d.id,
       a.last_seq + d.k, (a.balance - d.taken)::bigint
FROM due d
JOIN accounts a ON a.id = d.account_id
WHERE a.id = @account_id
ORDER BY d.k
RETURNING id, account_id, amount, description, dedupe_key::text AS dedupe_key, seq, balance_after, created_at;

-- name: CitusCreditLotsCloseExpiredEmptyForAccount :execrows
-- CreditLotsCloseExpiredEmpty on one locked account's shard (a multi-shard UPDATE would lock every shard
-- of credit_lots and queue every other pass behind it). Closed at the transaction's time: Citus refuses a
-- volatile function (clock_timestamp) in an UPDATE of a distributed table.
UPDATE credit_lots
SET closed_at = now()
WHERE account_id = @account_id
  AND closed_at IS NULL AND expires_at <= now() AND remaining = 0;

-- name: CitusCreditLotsClose :one
-- CreditLotsClose on Citus, closed at the transaction's time (Citus refuses a volatile function in an
-- UPDATE of a distributed table). Returns no row when it was closed already or still holds credit.
UPDATE credit_lots
SET closed_at = now()
WHERE account_id = @account_id AND id = @id AND closed_at IS NULL AND remaining = 0
RETURNING id, account_id, entry_id, category, priority, amount, remaining, expires_at, created_at, closed_at;
