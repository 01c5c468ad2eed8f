-- The one road into the ledger (SPEC §21): every entry is inserted by ledger_append (sql/migrations),
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
-- nothing was paid, cost 0); on_behalf_of, on a pool's part of a member's capture, the member ('': none).
-- With balance, nothing is locked or inserted unless the accounts' balance is still balance: a group
-- planned on the balance its previous group left finds a balance moved meanwhile here.
-- A row left out returns nothing: its key was taken (before, or meanwhile by a transaction this one
-- waited for), its account does not exist or was refused. A balance beyond a bigint fails the statement
-- with numeric_value_out_of_range; a key taken meanwhile by a row that was not its account's last fails
-- it in ledger_chain.
SELECT coalesce(a.k, 0)::bigint AS k, a.id::bigint AS id, a.account_id::text AS account_id, a.kind::text AS kind,
       a.amount::bigint AS amount, a.description::text AS description, coalesce(a.dedupe_key, '')::text AS dedupe_key,
       coalesce(a.payment_intent, '')::text AS payment_intent, a.seq::bigint AS seq, a.balance_after::bigint AS balance_after,
       a.created_at::timestamptz AS created_at, coalesce(a.lot_id, 0)::bigint AS lot_id,
       coalesce(a.reverses_entry_id, 0)::bigint AS reverses_entry_id,
       coalesce(a.subject, '')::text AS subject, coalesce(a.feature, '')::text AS feature,
       coalesce(a.on_behalf_of, '')::text AS on_behalf_of
FROM ledger_append(@account_ids::text[], @kinds::text[], @amounts::bigint[], @descriptions::text[],
                   @dedupe_keys::text[], @payment_intents::text[], @no_overdraw::boolean[], @lot_ids::bigint[],
                   @reverses::text[], @lot_categories::text[], @lot_priorities::smallint[],
                   @lot_expires_at::text[], @lot_ttls::float8[], sqlc.narg(balance)::bigint,
                   p_subjects => @subjects::text[], p_features => @features::text[],
                   p_lot_cost_amounts => @lot_cost_amounts::bigint[], p_lot_cost_currencies => @lot_cost_currencies::text[],
                   p_on_behalf_of => @on_behalf_of::text[])
    AS a (k, id, account_id, kind, amount, description, dedupe_key, payment_intent, seq, balance_after, created_at, lot_id, reverses_entry_id,
          subject, feature, on_behalf_of);

-- name: LedgerAppendForDecisions :many
-- Bills the chunk (after_seq, upto_seq] of decisions of the locked accounts (account_ids, from
-- AccountsLock), in one statement: a usage entry keyed decision:{id} for each decision not billed yet,
-- in decision seq order per account. A decision naming a hold captured through the API is billed only for
-- its cost beyond the captured amount, and not at all within it: the hold's own entry
-- (hold:{account_id}:{hold_id}) paid for that much (SPEC §21). Each entry carries its decision's subject
-- and feature. ledger_append leaves out the keys already posted, so re-reading a billed chunk posts
-- nothing. A balance beyond a bigint fails the statement with numeric_value_out_of_range. Returns the
-- entries inserted, each with its own balance_after.
-- Cascades (SPEC §18): tree_ids, tree_parents ('' for a root), tree_depths and tree_available describe
-- every locked account, the decisions' accounts and their pools, as locked. A decision on a member is
-- paid by the member's own available first, then its parent's, then its grandparent's, in decision seq
-- order (what no level can pay, the member owes: the work was done); the member's entry (decision:{id})
-- carries its part, 0 when its pools paid it all, and each pool that pays posts its part under
-- decision:{id}@{pool_id} with on_behalf_of the member. A decision of a tree already billed is left out
-- of the plan (ledger_keys_taken), so that a replay plans no part again, even one its first billing did
-- not need. Three window passes, deepest level first, whatever the number of decisions.
WITH tree_in AS (
    SELECT unnest(@tree_ids::text[]) AS id, unnest(@tree_parents::text[]) AS parent_id,
           unnest(@tree_depths::int[]) AS depth, unnest(@tree_available::bigint[]) AS available
), capturing AS (
    -- The holds this chunk's decisions capture (HoldsCaptureForDecisions, after this statement: the first
    -- decision naming a hold still held, received while it was live). Only a tree's: elsewhere no level's
    -- available is read.
    SELECT h.account_id, h.id, h.amount, h.pooled
    FROM (
        SELECT DISTINCT ON (d.account_id, d.hold_id) d.account_id, d.hold_id, d.received_at
        FROM decisions d
        -- The chunk's accounts, as HoldsCaptureForDecisions reads them (not an account left out as
        -- unbillable), of a tree.
        JOIN unnest(@account_ids::text[]) AS billed (account_id) ON billed.account_id = d.account_id
        JOIN tree_in t ON t.id = d.account_id AND (t.parent_id <> '' OR t.id IN (SELECT c.parent_id FROM tree_in c))
        WHERE d.seq > @after_seq::bigint
          AND d.seq <= @upto_seq::bigint
          AND d.hold_id IS NOT NULL
          -- Once per statement (a one-time filter): a chunk without trees reads no decision here.
          AND EXISTS (SELECT 1 FROM tree_in c WHERE c.parent_id <> '')
        ORDER BY d.account_id, d.hold_id, d.seq
    ) n
    JOIN holds h ON h.account_id = n.account_id AND h.id = n.hold_id AND h.status = 'held'
                AND n.received_at BETWEEN h.created_at AND h.expires_at
), releasing AS (
    -- What those holds reserved, at every level: the capture releases it, so the chunk's decisions may
    -- draw it.
    SELECT x.id, sum(x.amount) AS amount
    FROM (
        SELECT c.account_id AS id, c.amount - c.pooled AS amount FROM capturing c
        UNION ALL
        SELECT r.pool_id, r.amount
        FROM capturing c
        JOIN hold_reservations r ON r.account_id = c.account_id AND r.hold_id = c.id
        WHERE c.pooled > 0
    ) x
    GROUP BY x.id
), tree AS (
    SELECT t.id, nullif(t.parent_id, '') AS parent_id, t.depth,
           greatest(t.available + coalesce(r.amount, 0), 0) AS available
    FROM tree_in t
    LEFT JOIN releasing r ON r.id = t.id
), chunk AS (
    SELECT d.account_id, d.seq, d.id, d.subject, d.feature, d.cost - coalesce(h.captured_amount, 0) AS amount,
           t.depth, t.parent_id AS p1, t1.parent_id AS p2,
           t.parent_id IS NOT NULL OR EXISTS (SELECT 1 FROM tree c WHERE c.parent_id = d.account_id) AS in_tree
    FROM decisions d
    -- A join (hashed), not account_id = ANY(...), which is a linear search per row in a generic plan.
    JOIN unnest(@account_ids::text[]) AS locked (account_id) ON locked.account_id = d.account_id
    JOIN tree t ON t.id = d.account_id
    LEFT JOIN tree t1 ON t1.id = t.parent_id
    -- Through holds_captured_apart_idx: only the holds captured apart from a decision are looked at.
    LEFT JOIN holds h
        ON h.account_id = d.account_id AND h.id = d.hold_id AND h.status = 'captured' AND h.decision_id IS NULL
    WHERE d.seq > @after_seq::bigint
      AND d.seq <= @upto_seq::bigint
      AND d.cost > coalesce(h.captured_amount, 0)
), taken AS (
    SELECT k.key FROM ledger_keys_taken(ARRAY(SELECT 'decision:' || c.id FROM chunk c WHERE c.in_tree)) AS k (key)
), due AS (
    -- The payer at each depth: the decision's account at its own depth, its parent one level up, its
    -- grandparent two levels up.
    SELECT c.*,
           CASE c.depth WHEN 2 THEN c.account_id END AS payer2,
           CASE c.depth WHEN 1 THEN c.account_id WHEN 2 THEN c.p1 END AS payer1,
           CASE c.depth WHEN 0 THEN c.account_id WHEN 1 THEN c.p1 WHEN 2 THEN c.p2 END AS payer0
    FROM chunk c
    WHERE NOT (c.in_tree AND ('decision:' || c.id) IN (SELECT t.key FROM taken t))
), level2 AS (
    -- Each level pays greedily in seq order: of a running demand cum, min(cum, available) is paid.
    SELECT d.*, coalesce(least(w.cum, w.available) - least(w.cum - d.amount, w.available), 0) AS pay2
    FROM due d
    LEFT JOIN (
        SELECT x.id, t.available, sum(x.amount) OVER (PARTITION BY x.payer2 ORDER BY x.seq ROWS UNBOUNDED PRECEDING) AS cum
        FROM due x JOIN tree t ON t.id = x.payer2
    ) w ON w.id = d.id
), level1 AS (
    SELECT d.*, coalesce(least(w.cum, w.available) - least(w.cum - (d.amount - d.pay2), w.available), 0) AS pay1
    FROM level2 d
    LEFT JOIN (
        SELECT x.id, t.available,
               sum(x.amount - x.pay2) OVER (PARTITION BY x.payer1 ORDER BY x.seq ROWS UNBOUNDED PRECEDING) AS cum
        FROM level2 x JOIN tree t ON t.id = x.payer1
    ) w ON w.id = d.id
), level0 AS (
    SELECT d.*,
           coalesce(least(w.cum, w.available) - least(w.cum - (d.amount - d.pay2 - d.pay1), w.available), 0) AS pay0
    FROM level1 d
    LEFT JOIN (
        SELECT x.id, t.available,
               sum(x.amount - x.pay2 - x.pay1) OVER (PARTITION BY x.payer0 ORDER BY x.seq ROWS UNBOUNDED PRECEDING) AS cum
        FROM level1 x JOIN tree t ON t.id = x.payer0
    ) w ON w.id = d.id
), parts AS (
    -- The member's part: what its own level paid and what no level could; then each pool's.
    SELECT l.account_id, l.seq, 0 AS level, l.id, l.subject, l.feature, NULL::text AS on_behalf_of,
           l.amount - CASE l.depth WHEN 2 THEN l.pay1 + l.pay0 WHEN 1 THEN l.pay0 ELSE 0 END AS amount
    FROM level0 l
    UNION ALL
    SELECT l.p1, l.seq, 1, l.id, l.subject, l.feature, l.account_id,
           CASE l.depth WHEN 2 THEN l.pay1 ELSE l.pay0 END
    FROM level0 l
    WHERE l.p1 IS NOT NULL AND CASE l.depth WHEN 2 THEN l.pay1 ELSE l.pay0 END > 0
    UNION ALL
    SELECT l.p2, l.seq, 2, l.id, l.subject, l.feature, l.account_id, l.pay0
    FROM level0 l
    WHERE l.p2 IS NOT NULL AND l.pay0 > 0
), plan AS (
    SELECT array_agg(p.account_id ORDER BY p.account_id, p.seq, p.level) AS account_ids,
           array_agg('usage'::text ORDER BY p.account_id, p.seq, p.level) AS kinds,
           array_agg(-p.amount::bigint ORDER BY p.account_id, p.seq, p.level) AS amounts,
           array_agg(CASE WHEN p.on_behalf_of IS NULL THEN 'decision ' || p.id
                          ELSE 'decision ' || p.id || ' of ' || p.on_behalf_of END
                     ORDER BY p.account_id, p.seq, p.level) AS descriptions,
           array_agg(CASE WHEN p.on_behalf_of IS NULL THEN 'decision:' || p.id
                          ELSE 'decision:' || p.id || '@' || p.account_id END
                     ORDER BY p.account_id, p.seq, p.level) AS dedupe_keys,
           array_agg(p.subject ORDER BY p.account_id, p.seq, p.level) AS subjects,
           array_agg(p.feature ORDER BY p.account_id, p.seq, p.level) AS features,
           array_agg(p.on_behalf_of ORDER BY p.account_id, p.seq, p.level) AS on_behalf_of
    FROM parts p
    HAVING count(*) > 0
)
SELECT a.id::bigint AS id, a.account_id::text AS account_id, a.amount::bigint AS amount,
       a.description::text AS description, coalesce(a.dedupe_key, '')::text AS dedupe_key, a.seq::bigint AS seq,
       a.balance_after::bigint AS balance_after, a.created_at::timestamptz AS created_at,
       coalesce(a.subject, '')::text AS subject, coalesce(a.feature, '')::text AS feature,
       coalesce(a.on_behalf_of, '')::text AS on_behalf_of
FROM plan
CROSS JOIN LATERAL ledger_append(plan.account_ids, plan.kinds, plan.amounts, plan.descriptions, plan.dedupe_keys,
                                 p_subjects => plan.subjects, p_features => plan.features,
                                 p_on_behalf_of => plan.on_behalf_of)
    AS a (k, id, account_id, kind, amount, description, dedupe_key, payment_intent, seq, balance_after, created_at, lot_id, reverses_entry_id,
          subject, feature, on_behalf_of)
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
SELECT e.id, e.account_id, e.kind, e.amount, e.description, e.dedupe_key, e.payment_intent, e.created_at, e.seq, e.balance_after,
       e.subject, e.feature, e.on_behalf_of
FROM ledger_by_keys(ARRAY[@dedupe_key::text]) e;

-- name: LedgerListByDedupeKeys :many
-- The entries already posted under any of a group's dedupe keys: those members are replays or
-- conflicts and are not inserted again. Keys never posted return nothing.
SELECT e.id, e.account_id, e.kind, e.amount, e.description, e.dedupe_key, e.payment_intent, e.created_at, e.seq, e.balance_after,
       e.subject, e.feature, e.on_behalf_of
FROM ledger_by_keys(@dedupe_keys::text[]) e;

-- name: LedgerListByAccount :many
-- An account's entries, newest first. Keyset pagination on id (pass the last id seen as before_id):
-- stable while new entries are inserted, since ids only grow.
SELECT id, account_id, kind, amount, description, dedupe_key, payment_intent, created_at, seq, balance_after, subject, feature,
       on_behalf_of
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
SELECT id, account_id, kind, amount, description, dedupe_key, payment_intent, created_at, seq, balance_after, subject, feature,
       on_behalf_of
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
SELECT id, account_id, kind, amount, description, dedupe_key, payment_intent, created_at, seq, balance_after, subject, feature,
       on_behalf_of
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

-- name: LedgerCascadeMismatches :many
-- verify (SPEC §18): each decision or hold captured through the API a pool paid part of whose member's
-- own entry (decision:{id} or hold:{account_id}:{hold_id}, on the member) is missing or held twice, or
-- whose parts (the member's and every {key}@{pool_id}) do not sum to what the decision billed (its cost,
-- less a hold captured through the API) or the hold captured. Empty when the cascades hold.
WITH cascaded AS (
    SELECT DISTINCT split_part(l.dedupe_key, '@', 1) AS effect
    FROM ledger l
    WHERE l.on_behalf_of IS NOT NULL
), parts AS (
    SELECT coalesce(l.on_behalf_of, l.account_id) AS member, split_part(l.dedupe_key, '@', 1) AS effect,
           (-sum(l.amount))::bigint AS paid,
           count(*) FILTER (WHERE l.on_behalf_of IS NULL) AS member_entries
    FROM ledger l
    JOIN cascaded c ON c.effect = split_part(l.dedupe_key, '@', 1)
    WHERE l.kind = 'usage'
    GROUP BY 1, 2
)
SELECT p.member::text AS member, p.effect::text AS effect, p.paid::bigint AS paid,
       p.member_entries::bigint AS member_entries,
       coalesce(d.cost - coalesce(h.captured_amount, 0), c.captured_amount, 0)::bigint AS billed
FROM parts p
LEFT JOIN decisions d ON d.account_id = p.member AND 'decision:' || d.id = p.effect
LEFT JOIN holds h
    ON h.account_id = d.account_id AND h.id = d.hold_id AND h.status = 'captured' AND h.decision_id IS NULL
-- A hold captured through the API: its parts sum to what it captured.
LEFT JOIN holds c
    ON c.account_id = p.member AND 'hold:' || c.account_id || ':' || c.id = p.effect
   AND c.status = 'captured' AND c.decision_id IS NULL
WHERE p.member_entries <> 1
   OR (d.id IS NULL AND c.id IS NULL)
   OR p.paid <> coalesce(d.cost - coalesce(h.captured_amount, 0), c.captured_amount)
ORDER BY p.member, p.effect;
