-- The one road into the ledger (SPEC §21): every entry is inserted by ledger_append (migration 000012),
-- which locks the accounts in id order, numbers each account's rows from its last_seq with balance_after
-- from its locked balance, leaves out rows whose key is taken and the rows of an account whose no-overdraw
-- row would go below zero, and returns each entry inserted with the position k of its planned row (k
-- 0: an expiry it posted on its own, for a lot a restore refilled after it closed). The statements
-- below differ only in where the planned rows come from: Go (LedgerAppend), or the decisions of a billing
-- chunk and the lots past their expiry, read in the same statement.

-- name: LedgerAppend :many
-- Inserts rows planned in Go, the arrays read in lockstep, one element per row ('' or 0: none; the lot
-- terms are read for credits only; no_overdraw refuses the row's account when the row would leave its
-- balance below zero; subjects and features name who spent and on what, for a hold's capture or an
-- adjustment that names them); lot_cost_amounts and lot_cost_currencies are what a credit's lot cost ('':
-- nothing was paid, cost 0). With balance, nothing is locked or inserted unless the accounts' balance
-- is still balance: a group planned on the balance its previous group left finds a balance moved
-- meanwhile here.
-- A row left out returns nothing: its key was taken (before, or meanwhile by a transaction this one
-- waited for), its account does not exist or was refused. A balance beyond a bigint fails the statement
-- with numeric_value_out_of_range; a key taken meanwhile by a row that was not its account's last fails
-- it in ledger_chain.
SELECT coalesce(a.k, 0)::bigint AS k, a.id::bigint AS id, a.account_id::text AS account_id, a.kind::text AS kind,
       a.amount::bigint AS amount, a.description::text AS description, coalesce(a.dedupe_key, '')::text AS dedupe_key,
       coalesce(a.payment_intent, '')::text AS payment_intent, a.seq::bigint AS seq, a.balance_after::bigint AS balance_after,
       a.created_at::timestamptz AS created_at, coalesce(a.lot_id, 0)::bigint AS lot_id,
       coalesce(a.reverses_entry_id, 0)::bigint AS reverses_entry_id,
       coalesce(a.subject, '')::text AS subject, coalesce(a.feature, '')::text AS feature
FROM ledger_append(@account_ids::text[], @kinds::text[], @amounts::bigint[], @descriptions::text[],
                   @dedupe_keys::text[], @payment_intents::text[], @no_overdraw::boolean[], @lot_ids::bigint[],
                   @reverses::text[], @lot_categories::text[], @lot_priorities::smallint[],
                   @lot_expires_at::text[], @lot_ttls::float8[], sqlc.narg(balance)::bigint,
                   p_subjects => @subjects::text[], p_features => @features::text[],
                   p_lot_cost_amounts => @lot_cost_amounts::bigint[], p_lot_cost_currencies => @lot_cost_currencies::text[])
    AS a (k, id, account_id, kind, amount, description, dedupe_key, payment_intent, seq, balance_after, created_at, lot_id, reverses_entry_id,
          subject, feature);

-- name: LedgerAppendForDecisions :many
-- Bills the chunk (after_seq, upto_seq] of decisions of the locked accounts (account_ids, from
-- AccountsLock), in one statement: a usage entry keyed decision:{id} of -cost for each decision not
-- billed yet, in decision seq order per account. A decision naming a hold captured through the API is
-- billed only for its cost beyond the captured amount, and not at all within it: the hold's own entry
-- (hold:{account_id}:{hold_id}) paid for that much (SPEC §21). Each entry carries its decision's subject
-- and feature. ledger_append leaves out the keys already posted, so re-reading a billed chunk posts
-- nothing. A balance beyond a bigint fails the statement with numeric_value_out_of_range. Returns the
-- entries inserted, each with its own balance_after.
SELECT a.id::bigint AS id, a.account_id::text AS account_id, a.amount::bigint AS amount,
       a.description::text AS description, coalesce(a.dedupe_key, '')::text AS dedupe_key, a.seq::bigint AS seq,
       a.balance_after::bigint AS balance_after, a.created_at::timestamptz AS created_at,
       coalesce(a.subject, '')::text AS subject, coalesce(a.feature, '')::text AS feature
FROM (
    SELECT array_agg(d.account_id ORDER BY d.account_id, d.seq) AS account_ids,
           array_agg('usage'::text ORDER BY d.account_id, d.seq) AS kinds,
           array_agg(-(d.cost - coalesce(h.captured_amount, 0)) ORDER BY d.account_id, d.seq) AS amounts,
           array_agg('decision ' || d.id ORDER BY d.account_id, d.seq) AS descriptions,
           array_agg('decision:' || d.id ORDER BY d.account_id, d.seq) AS dedupe_keys,
           array_agg(d.subject ORDER BY d.account_id, d.seq) AS subjects,
           array_agg(d.feature ORDER BY d.account_id, d.seq) AS features
    FROM decisions d
    -- A join (hashed), not account_id = ANY(...), which is a linear search per row in a generic plan.
    JOIN unnest(@account_ids::text[]) AS locked (account_id) ON locked.account_id = d.account_id
    -- Through holds_captured_apart_idx: only the holds captured apart from a decision are looked at.
    LEFT JOIN holds h
        ON h.account_id = d.account_id AND h.id = d.hold_id AND h.status = 'captured' AND h.decision_id IS NULL
    WHERE d.seq > @after_seq::bigint
      AND d.seq <= @upto_seq::bigint
      AND d.cost > coalesce(h.captured_amount, 0)
    HAVING count(*) > 0
) plan
CROSS JOIN LATERAL ledger_append(plan.account_ids, plan.kinds, plan.amounts, plan.descriptions, plan.dedupe_keys,
                                 p_subjects => plan.subjects, p_features => plan.features)
    AS a (k, id, account_id, kind, amount, description, dedupe_key, payment_intent, seq, balance_after, created_at, lot_id, reverses_entry_id,
          subject, feature)
ORDER BY 1;

-- name: LedgerAppendExpiries :many
-- Posts, in one statement, an expiry entry keyed expire:{lot_id} of -remaining for every open lot of the
-- locked accounts (account_ids, from AccountsLock) past its expiry on the database clock, in lot id
-- order per account; ledger_lots takes each lot's remaining and closes it. Read under the account locks,
-- so remaining is exact: a credit is never both spent and expired. Returns the entries inserted.
SELECT a.id::bigint AS id, a.account_id::text AS account_id, a.amount::bigint AS amount,
       a.description::text AS description, coalesce(a.dedupe_key, '')::text AS dedupe_key, a.seq::bigint AS seq,
       a.balance_after::bigint AS balance_after, a.created_at::timestamptz AS created_at
FROM (
    SELECT array_agg(l.account_id ORDER BY l.account_id, l.id) AS account_ids,
           array_agg('expiry'::text ORDER BY l.account_id, l.id) AS kinds,
           array_agg(-l.remaining ORDER BY l.account_id, l.id) AS amounts,
           array_agg('lot ' || l.id || ' expired' ORDER BY l.account_id, l.id) AS descriptions,
           array_agg('expire:' || l.id ORDER BY l.account_id, l.id) AS dedupe_keys,
           array_agg(l.id ORDER BY l.account_id, l.id) AS lot_ids
    FROM credit_lots l
    JOIN unnest(@account_ids::text[]) AS locked (account_id) ON locked.account_id = l.account_id
    WHERE l.closed_at IS NULL AND l.expires_at <= now() AND l.remaining > 0
    HAVING count(*) > 0
) plan
CROSS JOIN LATERAL ledger_append(plan.account_ids, plan.kinds, plan.amounts, plan.descriptions, plan.dedupe_keys,
                                 p_lot_ids => plan.lot_ids)
    AS a (k, id, account_id, kind, amount, description, dedupe_key, payment_intent, seq, balance_after, created_at, lot_id, reverses_entry_id,
          subject, feature)
ORDER BY 1;

-- name: LedgerGetByDedupeKey :one
-- The entry posted under a dedupe key, to tell an exact replay from a key reused with other
-- parameters. Returns no row when the key was never posted.
SELECT id, account_id, kind, amount, description, dedupe_key, payment_intent, created_at, seq, balance_after, subject, feature
FROM ledger
WHERE dedupe_key = @dedupe_key::text;

-- name: LedgerListByDedupeKeys :many
-- The entries already posted under any of a group's dedupe keys: those members are replays or
-- conflicts and are not inserted again. Keys never posted return nothing.
SELECT id, account_id, kind, amount, description, dedupe_key, payment_intent, created_at, seq, balance_after, subject, feature
FROM ledger
WHERE dedupe_key = ANY(@dedupe_keys::text[]);

-- name: LedgerListByAccount :many
-- An account's entries, newest first. Keyset pagination on id (pass the last id seen as before_id):
-- stable while new entries are inserted, since ids only grow.
SELECT id, account_id, kind, amount, description, dedupe_key, payment_intent, created_at, seq, balance_after, subject, feature
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
SELECT id, account_id, kind, amount, description, dedupe_key, payment_intent, created_at, seq, balance_after, subject, feature
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
SELECT id, kind, amount, description, dedupe_key, payment_intent, created_at, balance_after, subject, feature
FROM ledger
WHERE account_id = @account_id
ORDER BY seq DESC
LIMIT @max_rows;

-- name: LedgerListByPaymentIntent :many
-- The entries of one Stripe payment (its credit, refunds, disputes and their restores) in posting
-- order, through ledger_payment_intent_idx.
SELECT id, account_id, kind, amount, description, dedupe_key, payment_intent, created_at, seq, balance_after, subject, feature
FROM ledger
WHERE payment_intent = @payment_intent::text
ORDER BY id
LIMIT @max_rows;

-- name: LedgerLotCost :one
-- What a credit entry said its lot cost (0 and '' when nothing: a debit, or a credit nothing paid for),
-- to tell a replayed adjustment from one reusing its key with another cost. Returns no row when the entry
-- does not exist.
SELECT coalesce(lot_cost_amount, 0)::bigint AS cost_amount, coalesce(lot_cost_currency, '')::text AS cost_currency
FROM ledger
WHERE account_id = @account_id AND id = @id;
