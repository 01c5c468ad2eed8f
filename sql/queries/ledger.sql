-- name: LedgerInsert :one
-- Appends an entry after locking its account row (FOR NO KEY UPDATE: other entries' foreign-key checks
-- stay free), numbered last_seq + 1 with balance_after = balance + amount from that locked row; the
-- trigger ledger_chain then moves the account. With a dedupe key, an entry is inserted at most once
-- (ledger_dedupe_idx). Returns no row when the key was already posted ("already done", never an error),
-- when the account does not exist, or, with no_overdraw, when the locked balance plus amount would be
-- below zero; the caller tells these apart. A balance beyond a bigint fails with
-- numeric_value_out_of_range.
INSERT INTO ledger (account_id, kind, amount, description, dedupe_key, payment_intent, seq, balance_after)
SELECT a.id, @kind, @amount::bigint, @description, sqlc.narg(dedupe_key), sqlc.narg(payment_intent),
       a.last_seq + 1, a.balance + @amount::bigint
FROM accounts a
WHERE a.id = @account_id
  AND (NOT @no_overdraw::boolean OR a.balance + @amount::bigint >= 0)
FOR NO KEY UPDATE
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id, seq, balance_after, created_at;

-- name: LedgerGetByDedupeKey :one
-- The entry posted under a dedupe key, to tell an exact replay from a key reused with other
-- parameters. Returns no row when the key was never posted.
SELECT id, account_id, kind, amount, description, dedupe_key, payment_intent, created_at, seq, balance_after
FROM ledger
WHERE dedupe_key = @dedupe_key::text;

-- name: LedgerListByAccount :many
-- An account's entries, newest first. Keyset pagination on id (pass the last id seen as before_id):
-- stable while new entries are inserted, since ids only grow.
SELECT id, account_id, kind, amount, description, dedupe_key, payment_intent, created_at, seq, balance_after
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
SELECT id, account_id, kind, amount, description, dedupe_key, payment_intent, created_at, seq, balance_after
FROM ledger
WHERE dedupe_key = ANY(@dedupe_keys::text[]);

-- name: LedgerInsertGroup :many
-- Appends a posting group's admitted entries to one account in one statement; the arrays are read in
-- lockstep, one element per entry (an empty dedupe key or payment intent means none). The group was
-- planned on start_balance (its admissions depend on it), so the statement locks the account row
-- itself (FOR NO KEY UPDATE; a row AccountsLockForGroup locked already stays locked) and inserts
-- nothing, returning no row, unless the balance is still start_balance: after waiting for another
-- transaction's lock, the balance is checked again on the row as that transaction left it, and a row
-- with another balance is neither used nor locked. A group planned on the balance its previous group
-- left runs here without a lock statement of its own, and a balance moved meanwhile (another process,
-- another path) is found here, not posted over; the caller then locks the row and plans again. Entries are
-- numbered last_seq + 1, + 2, ... in array order, each with balance_after = balance + the running sum,
-- and ledger_chain moves the account. The no-overdraw rule is held here, not only by the group's plan:
-- nothing is inserted (no row returned) if the running balance after an entry flagged no_overdraw
-- would be below zero. ledger_dedupe_idx still holds: a key posted meanwhile inserts nothing and
-- returns no row for it; a skipped entry before the last leaves a hole, which ledger_chain refuses
-- (check_violation), so a group never leaves a wrong chain. ledger_kind_sign_check fails the whole
-- statement; a balance beyond a bigint fails with numeric_value_out_of_range.
WITH locked AS MATERIALIZED (
    SELECT a.id, a.last_seq, a.balance
    FROM accounts a
    WHERE a.id = @account_id AND a.balance = @start_balance::bigint
    FOR NO KEY UPDATE
), steps AS (
    SELECT a.id AS account_id, e.kind, e.amount, e.description, e.dedupe_key, e.payment_intent, e.no_overdraw,
           e.k, a.last_seq + e.k AS seq,
           a.balance + sum(e.amount::numeric) OVER (ORDER BY e.k ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
               AS balance_after
    FROM locked a
    CROSS JOIN (
        SELECT i AS k, (@kinds::text[])[i] AS kind, (@amounts::bigint[])[i] AS amount,
               (@descriptions::text[])[i] AS description, (@dedupe_keys::text[])[i] AS dedupe_key,
               (@payment_intents::text[])[i] AS payment_intent, (@no_overdraw::boolean[])[i] AS no_overdraw
        FROM generate_subscripts(@amounts::bigint[], 1) AS i
    ) e
)
INSERT INTO ledger (account_id, kind, amount, description, dedupe_key, payment_intent, seq, balance_after)
SELECT account_id, kind, amount, description, nullif(dedupe_key, ''), nullif(payment_intent, ''), seq,
       balance_after::bigint
FROM steps
WHERE NOT EXISTS (SELECT 1 FROM steps s WHERE s.no_overdraw AND s.balance_after < 0)
ORDER BY k
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id, dedupe_key, seq, balance_after, created_at;

-- name: LedgerInsertCredits :many
-- Appends credits to any number of accounts in one statement (the webhook's group commit of first
-- deliveries); the arrays are read in lockstep, one element per credit, each with a dedupe key. The
-- accounts are locked first, in id order (FOR NO KEY UPDATE, as LedgerInsert and billing take them), so
-- that two such statements, or this and billing, queue instead of deadlocking. Each account's credits
-- are numbered from its last_seq + 1 in array order, each with balance_after = balance + the running
-- sum, and ledger_chain moves each account once. ledger_dedupe_idx holds: a key posted before is
-- left out of the chain and returns no row; one posted meanwhile by a transaction that had not
-- committed when this one read also inserts nothing, and if it was not its account's last credit, the
-- hole it leaves fails the statement in ledger_chain. Credits of an account that does not exist are
-- not inserted. A balance beyond a bigint fails the statement with numeric_value_out_of_range.
-- Returns the entries inserted, each with its own seq and balance_after.
WITH credit AS MATERIALIZED (
    SELECT i AS k, (@account_ids::text[])[i] AS account_id, (@kinds::text[])[i] AS kind,
           (@amounts::bigint[])[i] AS amount, (@descriptions::text[])[i] AS description,
           (@dedupe_keys::text[])[i] AS dedupe_key, (@payment_intents::text[])[i] AS payment_intent,
           -- One probe of ledger_dedupe_idx per credit. A column, not a filter: the planner cannot
           -- estimate the filter, and an anti join would read the whole ledger.
           (SELECT l.id FROM ledger l WHERE l.dedupe_key = (@dedupe_keys::text[])[i]) IS NULL AS unposted
    FROM generate_subscripts(@account_ids::text[], 1) AS i
), locked AS MATERIALIZED (
    -- = ANY on the primary key: an index scan, whatever the planner guesses of the arrays' length.
    SELECT a.id, a.last_seq, a.balance
    FROM accounts a
    WHERE a.id = ANY(@account_ids::text[])
    ORDER BY a.id
    FOR NO KEY UPDATE
), chained AS (
    SELECT c.account_id, c.kind, c.amount, c.description, c.dedupe_key, c.payment_intent,
           l.last_seq + row_number() OVER w AS seq,
           (l.balance + sum(c.amount::numeric) OVER w)::bigint AS balance_after
    FROM credit c
    JOIN locked l ON l.id = c.account_id
    WHERE c.unposted
    WINDOW w AS (PARTITION BY c.account_id ORDER BY c.k ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
)
INSERT INTO ledger (account_id, kind, amount, description, dedupe_key, payment_intent, seq, balance_after)
SELECT account_id, kind, amount, description, dedupe_key, nullif(payment_intent, ''), seq, balance_after
FROM chained
ORDER BY account_id, seq
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id, account_id, dedupe_key::text AS dedupe_key, seq, balance_after, created_at;

-- Usage billing: the reconciler bills decisions as usage entries keyed decision:{id}, a chunk of
-- thousands of decisions (by seq) per transaction. ledger_dedupe_idx, not a flag on decisions, makes
-- billing a decision at most once: re-reading any window of decisions posts nothing.
--
-- Per chunk, in one transaction: DecisionsChunkEnd finds the chunk, DecisionsUnbilledByAccount names
-- the accounts with decisions still to bill, AccountsLockForBilling locks them in id order,
-- LedgerUsageInsertForDecisions inserts the entries (and ledger_chain moves those balances).

-- name: LedgerUsageInsertForDecisions :many
-- Bills the chunk (after_seq, upto_seq] in one statement: inserts a usage entry of -cost keyed
-- decision:{id} for each decision not billed yet of a locked account (account_ids, from
-- AccountsLockForBilling), in decision seq order per account: numbered from the account's last_seq + 1,
-- each with balance_after = balance - the running sum of costs. ledger_chain then moves each account
-- once. Only decisions without an entry are chained, read under the account locks (billing is the only
-- path that posts decision:{id} keys, and it takes those locks first); should one be posted meanwhile
-- all the same, ON CONFLICT skips it, the chain has a hole and ledger_chain fails the statement
-- (check_violation) instead of leaving a wrong chain. Only locked accounts are billed, so the balance
-- update never takes a lock out of order. A balance beyond a bigint fails the statement with
-- numeric_value_out_of_range. Returns the entries inserted, each with its own balance_after.
WITH chunk AS MATERIALIZED (
    SELECT d.account_id, d.id, d.cost, d.seq,
           -- One probe of ledger_dedupe_idx per decision, as DecisionsUnbilledByAccount. A column, not a
           -- filter: the planner cannot estimate the filter, and a guess of one row makes nested loops.
           (SELECT l.id FROM ledger l WHERE l.dedupe_key = 'decision:' || d.id) IS NULL AS unbilled
    FROM decisions d
    -- A join (hashed), not account_id = ANY(...), which is a linear search per row in a generic plan.
    JOIN unnest(@account_ids::text[]) AS locked (account_id) ON locked.account_id = d.account_id
    WHERE d.seq > @after_seq::bigint
      AND d.seq <= @upto_seq::bigint
), chained AS (
    -- The chain counts and sums only the unbilled decisions, which alone are inserted.
    SELECT c.account_id, c.id, c.cost, c.seq, c.unbilled,
           a.last_seq + count(*) FILTER (WHERE c.unbilled) OVER w AS entry_seq,
           (a.balance - coalesce(sum(c.cost::numeric) FILTER (WHERE c.unbilled) OVER w, 0))::bigint AS balance_after
    FROM chunk c
    JOIN accounts a ON a.id = c.account_id
    WINDOW w AS (PARTITION BY c.account_id ORDER BY c.seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
), inserted AS (
    INSERT INTO ledger (account_id, kind, amount, description, dedupe_key, seq, balance_after)
    SELECT account_id, 'usage', -cost, 'decision ' || id, 'decision:' || id, entry_seq, balance_after
    FROM chained
    WHERE unbilled
    ORDER BY seq
    ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
    RETURNING id, account_id, amount, description, dedupe_key, seq, balance_after, created_at
)
SELECT id, account_id, amount, description, dedupe_key::text AS dedupe_key, seq, balance_after, created_at
FROM inserted
ORDER BY id;

-- name: LedgerBalanceAt :one
-- The balance_after of the account's last entry created at or before at (ledger_account_created_idx);
-- 0 when there is none. Does not say whether the account exists.
SELECT coalesce((
    SELECT balance_after
    FROM ledger
    WHERE account_id = @account_id
      AND created_at <= @at
    ORDER BY created_at DESC, seq DESC
    LIMIT 1
), 0)::bigint AS balance;

-- name: LedgerLastBefore :one
-- The seq and balance_after of the account's last entry created before before_time
-- (ledger_account_created_idx), or 0 and 0 when there is none. A statement from..to is the entries with
-- seq in (last before from, last before to], so that opening + the sum of its amounts = closing by the
-- chain rule.
SELECT coalesce(max(seq), 0)::bigint AS seq, coalesce(max(balance_after), 0)::bigint AS balance_after
FROM (
    SELECT seq, balance_after
    FROM ledger
    WHERE account_id = @account_id
      AND created_at < @before_time
    ORDER BY created_at DESC, seq DESC
    LIMIT 1
) last_entry;

-- name: LedgerStatementPage :many
-- A page of the account's entries with seq in (after_seq, upto_seq], in seq order
-- (ledger_account_seq_key): a statement reads itself page by page, in constant memory.
SELECT id, account_id, kind, amount, description, dedupe_key, payment_intent, created_at, seq, balance_after
FROM ledger
WHERE account_id = @account_id
  AND seq > @after_seq::bigint
  AND seq <= @upto_seq::bigint
ORDER BY seq
LIMIT @max_rows;

-- name: LedgerChainBreaks :many
-- Entries that break their account's chain (verify), set-based with one window over the ledger: a seq
-- that does not follow the previous one by 1 (the first is 1), or a balance_after that is not the
-- previous one plus amount (the first: amount). Empty when the chain holds.
SELECT account_id, seq, id, amount, balance_after, expected_seq::bigint AS expected_seq,
       expected_balance_after::bigint AS expected_balance_after
FROM (
    SELECT account_id, seq, id, amount, balance_after,
           coalesce(lag(seq) OVER w, 0) + 1 AS expected_seq,
           coalesce(lag(balance_after) OVER w, 0) + amount::numeric AS expected_balance_after
    FROM ledger
    WINDOW w AS (PARTITION BY account_id ORDER BY seq)
) chain
WHERE seq <> expected_seq OR balance_after <> expected_balance_after
ORDER BY account_id, seq
LIMIT 1000;

-- name: LedgerPresentIDs :many
-- Which of ids the ledger holds, as the caller's transaction sees it: a dry run keeps only the entries
-- its rolled-back transaction still holds (an effect that parks rolls its own postings back).
SELECT id
FROM ledger
WHERE id = ANY(@ids::bigint[]);

-- name: LedgerTimelineByAccount :many
-- An account's newest entries (at most max_rows), newest first, each with the balance_after it
-- recorded (ledger_account_seq_key, read backwards).
SELECT id, kind, amount, description, dedupe_key, payment_intent, created_at, balance_after
FROM ledger
WHERE account_id = @account_id
ORDER BY seq DESC
LIMIT @max_rows;

-- name: LedgerListByPaymentIntent :many
-- The entries of one Stripe payment (its credit, refunds, disputes and their restores) in posting
-- order, through ledger_payment_intent_idx.
SELECT id, account_id, kind, amount, description, dedupe_key, payment_intent, created_at, seq, balance_after
FROM ledger
WHERE payment_intent = @payment_intent::text
ORDER BY id
LIMIT @max_rows;
