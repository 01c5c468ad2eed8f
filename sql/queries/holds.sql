-- Holds (SPEC section 11). Every path that writes holds locks the account row first (accounts in id
-- order when there are several): an authorisation then inserts and reserves; a resolution moves the
-- hold out of held by a conditional UPDATE, then releases the reservation. The API, group commit, the
-- expiry pass and billing take their locks in one order, so they queue instead of deadlocking, and
-- whichever comes first is the one resolution.

-- name: HoldsGetByIDs :many
-- The account's stored holds among ids: in a group of authorisations, those members are replays or
-- conflicts, answered before admission and never inserted again.
SELECT account_id, id, amount, status, captured_amount, decision_id, expires_at, created_at, resolved_at, subject, feature, limit_ids, window_starts, pooled
FROM holds
WHERE account_id = @account_id
  AND id = ANY(@ids::text[]);

-- name: HoldsInsertGroup :many
-- Inserts the admitted holds of one account (one, or a group's) and reserves them, in one statement (one
-- round trip), the arrays read in lockstep ('' subject or feature: none). The account is locked by
-- AccountsLock first, with its pools (roots first), and its current windows opened by SpendWindowsOpen,
-- so the holds were admitted against its current rows, and each hold comes with the windows of the
-- limits that apply to it (the pair_ arrays: a hold's id, a limit and that limit's current window) and
-- with what its account's pools reserve of it (pooled: HoldsReservePools reserves that, next, SPEC §18);
-- the statement keeps every condition all the same, and says whether each held: reserved, the available
-- balance (balance - held) covers what the account reserves itself (the sum of amount - pooled);
-- within_limits, every limit that applies to a hold
-- (scope account, or its subject or feature) is among its pairs, and every window took its holds' sum, a
-- hard limit's only while spent + held + sum <= its cap. Each hold records its pairs (limit_ids,
-- window_starts). A false flag means the plan was wrong
-- (or, for a single authorisation, the refusal): the caller rolls back, and nothing is kept. A soft
-- limit's window reaching its cap records reached_at (limit.reached, once per window). holds_pkey still
-- holds: an id inserted before (a replay) or meanwhile by another transaction returns no row for it, and
-- the caller rolls back and plans the group again with the stored ids read first. Every table is read
-- and written through the account's id, so that on Citus the statement runs on the account's shard.
WITH batch AS (
    -- Set-returning functions in one select list run in lockstep: the arrays zipped.
    SELECT unnest(@ids::text[]) AS id, unnest(@amounts::bigint[]) AS amount,
           unnest(@expires_in_seconds::double precision[]) AS ttl,
           nullif(unnest(@subjects::text[]), '') AS subject, nullif(unnest(@features::text[]), '') AS feature,
           unnest(@pooled::bigint[]) AS pooled
), pairs AS (
    SELECT unnest(@pair_hold_ids::text[]) AS hold_id, unnest(@pair_limit_ids::text[]) AS limit_id,
           unnest(@pair_window_starts::timestamptz[]) AS window_start
), inserted AS (
    INSERT INTO holds (account_id, id, amount, expires_at, subject, feature, limit_ids, window_starts, pooled)
    SELECT @account_id::text, b.id, b.amount, now() + make_interval(secs => b.ttl), b.subject, b.feature,
           coalesce(h.limit_ids, '{}'), coalesce(h.window_starts, '{}'), b.pooled
    FROM batch b
    -- Each hold's pairs gathered in one pass (hashed by hold), not looked up per hold: a group of n
    -- holds under k limits would otherwise scan n*k pairs n times.
    LEFT JOIN (
        SELECT p.hold_id, array_agg(p.limit_id ORDER BY p.limit_id) AS limit_ids,
               array_agg(p.window_start ORDER BY p.limit_id) AS window_starts
        FROM pairs p
        GROUP BY p.hold_id
    ) h ON h.hold_id = b.id
    ON CONFLICT (account_id, id) DO NOTHING
    RETURNING account_id, id, amount, status, captured_amount, decision_id, expires_at, created_at, resolved_at, subject, feature, limit_ids, window_starts, pooled
), missed AS (
    -- A limit that applies to an inserted hold but is not among its pairs: the plan missed it.
    SELECT 1
    FROM inserted i
    JOIN spend_limits l
        ON l.account_id = @account_id::text
       AND (l.scope = 'account' OR l.scope_value = CASE l.scope WHEN 'subject' THEN i.subject ELSE i.feature END)
    WHERE NOT l.id = ANY(i.limit_ids)
), per_window AS (
    SELECT l.id AS limit_id, i.window_starts[k] AS window_start, min(l.amount) AS cap, min(l.mode) AS mode,
           sum(i.amount) AS amount, now() AS at
    FROM inserted i
    CROSS JOIN LATERAL generate_subscripts(i.limit_ids, 1) AS k
    JOIN spend_limits l ON l.account_id = @account_id::text AND l.id = i.limit_ids[k]
    GROUP BY l.id, i.window_starts[k]
), limited AS (
    -- The admission rule of a hard limit, on the locked row: never past its cap.
    UPDATE spend_windows w
    SET held = w.held + p.amount,
        reached_at = CASE WHEN p.mode = 'soft' AND w.reached_at IS NULL AND w.spent + w.held + p.amount >= p.cap
                          THEN p.at ELSE w.reached_at END
    FROM per_window p
    WHERE w.account_id = @account_id::text
      AND w.limit_id = p.limit_id
      AND w.window_start = p.window_start
      AND (p.mode = 'soft' OR w.spent + w.held + p.amount <= p.cap)
    RETURNING w.limit_id
), own AS (
    -- What the account reserves itself: what its pools do not (SPEC §18).
    SELECT sum(amount - pooled) AS amount FROM inserted
), reserved AS (
    UPDATE accounts
    SET held = held + (SELECT amount FROM own)
    WHERE id = @account_id::text
      AND ((SELECT amount FROM own) = 0 OR balance - held >= (SELECT amount FROM own))
    RETURNING id
)
SELECT inserted.account_id, inserted.id, inserted.amount, inserted.status, inserted.captured_amount,
       inserted.decision_id, inserted.expires_at, inserted.created_at, inserted.resolved_at, inserted.subject,
       inserted.feature, inserted.limit_ids, inserted.window_starts, inserted.pooled,
       EXISTS (SELECT 1 FROM reserved)::boolean AS reserved,
       (NOT EXISTS (SELECT 1 FROM missed)
        AND (SELECT count(*) FROM limited) = (SELECT count(*) FROM per_window))::boolean AS within_limits
FROM inserted;

-- name: HoldsInsertTreeGroup :many
-- HoldsInsertGroup for the holds of several accounts of one tree at once (a group of a hot pool's
-- members, SPEC §18), the account of each hold in account_ids and of each pair in pair_account_ids: the
-- same rows, conditions and flags, for every account at once (reserved: every account's own available
-- covers what it reserves itself). The accounts are locked with their pools first (AccountsLock, roots
-- first). One statement for the whole group instead of one per account; TestDifferentialHoldGroupsOfATree
-- holds it equal to one transaction per authorisation. On Citus it reaches every shard of the group's
-- accounts.
WITH batch AS (
    -- Set-returning functions in one select list run in lockstep: the arrays zipped.
    SELECT unnest(@account_ids::text[]) AS account_id, unnest(@ids::text[]) AS id, unnest(@amounts::bigint[]) AS amount,
           unnest(@expires_in_seconds::double precision[]) AS ttl,
           nullif(unnest(@subjects::text[]), '') AS subject, nullif(unnest(@features::text[]), '') AS feature,
           unnest(@pooled::bigint[]) AS pooled
), pairs AS (
    SELECT unnest(@pair_account_ids::text[]) AS account_id, unnest(@pair_hold_ids::text[]) AS hold_id,
           unnest(@pair_limit_ids::text[]) AS limit_id,
           unnest(@pair_window_starts::timestamptz[]) AS window_start
), inserted AS (
    INSERT INTO holds (account_id, id, amount, expires_at, subject, feature, limit_ids, window_starts, pooled)
    SELECT b.account_id, b.id, b.amount, now() + make_interval(secs => b.ttl), b.subject, b.feature,
           coalesce(h.limit_ids, '{}'), coalesce(h.window_starts, '{}'), b.pooled
    FROM batch b
    -- Each hold's pairs gathered in one pass (hashed by hold), not looked up per hold: a group of n
    -- holds under k limits would otherwise scan n*k pairs n times.
    LEFT JOIN (
        SELECT p.account_id, p.hold_id, array_agg(p.limit_id ORDER BY p.limit_id) AS limit_ids,
               array_agg(p.window_start ORDER BY p.limit_id) AS window_starts
        FROM pairs p
        GROUP BY p.account_id, p.hold_id
    ) h ON h.account_id = b.account_id AND h.hold_id = b.id
    ON CONFLICT (account_id, id) DO NOTHING
    RETURNING account_id, id, amount, status, captured_amount, decision_id, expires_at, created_at, resolved_at, subject, feature, limit_ids, window_starts, pooled
), missed AS (
    -- A limit that applies to an inserted hold but is not among its pairs: the plan missed it.
    SELECT 1
    FROM inserted i
    JOIN spend_limits l
        ON l.account_id = i.account_id
       AND (l.scope = 'account' OR l.scope_value = CASE l.scope WHEN 'subject' THEN i.subject ELSE i.feature END)
    WHERE NOT l.id = ANY(i.limit_ids)
), per_window AS (
    SELECT i.account_id, l.id AS limit_id, i.window_starts[k] AS window_start, min(l.amount) AS cap, min(l.mode) AS mode,
           sum(i.amount) AS amount, now() AS at
    FROM inserted i
    CROSS JOIN LATERAL generate_subscripts(i.limit_ids, 1) AS k
    JOIN spend_limits l ON l.account_id = i.account_id AND l.id = i.limit_ids[k]
    GROUP BY i.account_id, l.id, i.window_starts[k]
), limited AS (
    -- The admission rule of a hard limit, on the locked row: never past its cap.
    UPDATE spend_windows w
    SET held = w.held + p.amount,
        reached_at = CASE WHEN p.mode = 'soft' AND w.reached_at IS NULL AND w.spent + w.held + p.amount >= p.cap
                          THEN p.at ELSE w.reached_at END
    FROM per_window p
    WHERE w.account_id = p.account_id
      AND w.limit_id = p.limit_id
      AND w.window_start = p.window_start
      AND (p.mode = 'soft' OR w.spent + w.held + p.amount <= p.cap)
    RETURNING w.limit_id
), own AS (
    -- What each account reserves itself: what its pools do not (SPEC §18).
    SELECT account_id, sum(amount - pooled) AS amount FROM inserted GROUP BY account_id
), reserved AS (
    UPDATE accounts a
    SET held = a.held + o.amount
    FROM own o
    WHERE a.id = o.account_id
      AND (o.amount = 0 OR a.balance - a.held >= o.amount)
    RETURNING a.id
)
SELECT inserted.account_id, inserted.id, inserted.amount, inserted.status, inserted.captured_amount,
       inserted.decision_id, inserted.expires_at, inserted.created_at, inserted.resolved_at, inserted.subject,
       inserted.feature, inserted.limit_ids, inserted.window_starts, inserted.pooled,
       ((SELECT count(*) FROM reserved) = (SELECT count(*) FROM own))::boolean AS reserved,
       (NOT EXISTS (SELECT 1 FROM missed)
        AND (SELECT count(*) FROM limited) = (SELECT count(*) FROM per_window))::boolean AS within_limits
FROM inserted;

-- name: HoldsReservePools :one
-- Reserves on their pools what the holds HoldsInsertGroup (or HoldsInsertTreeGroup) just inserted draw on
-- them (SPEC §18), in the same transaction, the arrays read in lockstep (a hold's account and id, a pool,
-- what that pool reserves of it), and says whether it held: reserved, every pool has the available
-- (balance - held) for what it reserves, the reservations of each hold sum to its pooled, and each pool is
-- its account's parent or grandparent (which never change). The tree is locked roots first (AccountsLock)
-- before anything is written. Run only for holds that draw on a pool: the authorisations of an account
-- whose own available covers them stay one statement on its shard.
WITH planned AS (
    SELECT unnest(@account_ids::text[]) AS account_id, unnest(@hold_ids::text[]) AS hold_id,
           unnest(@pool_ids::text[]) AS pool_id, unnest(@amounts::bigint[]) AS amount
), inserted AS (
    INSERT INTO hold_reservations (account_id, hold_id, pool_id, amount)
    SELECT p.account_id, p.hold_id, p.pool_id, p.amount
    FROM planned p
    RETURNING account_id
), levels AS (
    SELECT p.pool_id, sum(p.amount) AS amount
    FROM planned p
    GROUP BY p.pool_id
), reserved AS (
    UPDATE accounts a
    SET held = a.held + l.amount
    FROM levels l
    WHERE a.id = l.pool_id
      AND a.balance - a.held >= l.amount
    RETURNING a.id
), parents AS MATERIALIZED (
    -- The pools of the holds' accounts, read apart: on Citus a parent's row is on another shard than
    -- its member's.
    SELECT a.id, a.parent_id
    FROM accounts a
    WHERE a.id IN (SELECT p.account_id FROM planned p)
      AND a.parent_id IS NOT NULL
), pools AS MATERIALIZED (
    SELECT c.id, c.parent_id AS pool_id FROM parents c
    UNION ALL
    SELECT c.id, g.parent_id
    FROM parents c
    JOIN accounts g ON g.id = c.parent_id
    WHERE g.parent_id IS NOT NULL
), misplanned AS (
    -- A hold whose reservations do not sum to its pooled.
    SELECT 1
    FROM holds h
    JOIN (SELECT p.account_id, p.hold_id, sum(p.amount) AS amount FROM planned p GROUP BY p.account_id, p.hold_id) p
        ON p.account_id = h.account_id AND p.hold_id = h.id
    WHERE h.pooled <> p.amount
    UNION ALL
    -- A reservation on an account that is not a pool of the hold's account.
    SELECT 1
    FROM planned p
    LEFT JOIN pools t ON t.id = p.account_id AND t.pool_id = p.pool_id
    WHERE t.id IS NULL
)
SELECT ((SELECT count(*) FROM inserted) = (SELECT count(*) FROM planned)
        AND (SELECT count(*) FROM reserved) = (SELECT count(*) FROM levels)
        AND NOT EXISTS (SELECT 1 FROM misplanned))::boolean AS reserved;

-- name: HoldsGet :one
-- Returns no row when the account has no hold with this id.
SELECT account_id, id, amount, status, captured_amount, decision_id, expires_at, created_at, resolved_at, subject, feature, limit_ids, window_starts, pooled
FROM holds
WHERE account_id = @account_id
  AND id = @id;

-- name: HoldsCapture :one
-- Moves the hold from held to captured, at most once: only the transaction whose UPDATE finds it still
-- held, unexpired on the database clock and at least amount (all of it when amount is null) returns a row, and only that transaction
-- releases the reservation and posts the usage. Returns no row otherwise (unknown, already resolved,
-- expired, or amount above the hold): the caller reads the hold to say which.
UPDATE holds
SET status = 'captured', captured_amount = coalesce(sqlc.narg(amount)::bigint, amount), resolved_at = now()
WHERE account_id = @account_id
  AND id = @id
  AND status = 'held'
  AND expires_at > now()
  AND amount >= coalesce(sqlc.narg(amount)::bigint, amount)
RETURNING account_id, id, amount, status, captured_amount, decision_id, expires_at, created_at, resolved_at, subject, feature, limit_ids, window_starts, pooled;

-- name: HoldsVoid :one
-- Moves the hold out of held, at most once: to voided, or to expired when its time is already up on
-- the database clock (what the expiry pass would do, so the answer never depends on whether the pass
-- has run). Returns no row when the hold is unknown or no longer held. The caller releases the
-- reservation in the same transaction.
UPDATE holds
SET status = holds_resolution(expires_at, now()), resolved_at = now()
WHERE account_id = @account_id
  AND id = @id
  AND status = 'held'
RETURNING account_id, id, amount, status, captured_amount, decision_id, expires_at, created_at, resolved_at, subject, feature, limit_ids, window_starts, pooled;

-- name: HoldsExpiredAccounts :many
-- Accounts with holds still held whose time is up on the database clock, at most max_accounts of them
-- in id order (holds_held_expires_at_idx). Read-only: the expiry pass locks them, then expires.
SELECT DISTINCT account_id
FROM holds
WHERE status = 'held'
  AND expires_at <= now()
ORDER BY account_id
LIMIT @max_accounts::int;

-- name: HoldsExpire :many
-- Expires, in one statement, every hold of the locked accounts (account_ids, locked in id order) that
-- is still held and whose time is up on the database clock, and releases each account's reservations
-- by their sum, in the accounts (on the hold's account, amount - pooled; on each pool, its reservation:
-- the pools are locked with their members, roots first) and in the spend windows that counted each hold. A hold captured or voided meanwhile is no longer held and is left alone: a capture
-- racing the expiry either resolved it first or finds it expired. Returns per account the holds
-- expired and the amount released.
WITH expired AS (
    UPDATE holds h
    SET status = 'expired', resolved_at = now()
    FROM unnest(@account_ids::text[]) AS locked (account_id)
    WHERE h.account_id = locked.account_id
      AND h.status = 'held'
      AND h.expires_at <= now()
    RETURNING h.account_id, h.id, h.amount, h.pooled, h.created_at, h.limit_ids, h.window_starts
), per_account AS (
    SELECT account_id, count(*)::bigint AS holds, sum(amount)::bigint AS released
    FROM expired
    GROUP BY account_id
), released AS (
    -- Runs to completion although nothing reads it, as every data-modifying WITH does.
    UPDATE accounts a
    SET held = a.held - p.released
    FROM (
        -- Each level what it reserved: the hold's account amount - pooled, each pool its reservation.
        SELECT x.account_id, sum(x.amount) AS released
        FROM (
            SELECT e.account_id, e.amount - e.pooled AS amount FROM expired e
            UNION ALL
            SELECT r.pool_id, r.amount
            FROM expired e
            JOIN hold_reservations r ON r.account_id = e.account_id AND r.hold_id = e.id
            WHERE e.pooled > 0
        ) x
        GROUP BY x.account_id
        HAVING sum(x.amount) > 0
    ) p
    WHERE a.id = p.account_id
), windows_released AS (
    -- And from the spend windows each hold was counted in (its limit_ids and window_starts; a limit
    -- created after the hold, under an id it names, never counted it).
    UPDATE spend_windows w
    SET held = w.held - c.released
    FROM (
        SELECT e.account_id, l.id AS limit_id, e.window_starts[k] AS window_start, sum(e.amount) AS released
        FROM expired e
        CROSS JOIN LATERAL generate_subscripts(e.limit_ids, 1) AS k
        JOIN spend_limits l ON l.account_id = e.account_id AND l.id = e.limit_ids[k] AND l.created_at <= e.created_at
        WHERE cardinality(e.limit_ids) > 0 -- as in HoldsCaptureForDecisions
        GROUP BY e.account_id, l.id, e.window_starts[k]
    ) c
    WHERE w.account_id = c.account_id
      AND w.limit_id = c.limit_id
      AND w.window_start = c.window_start
)
SELECT account_id, holds, released
FROM per_account
ORDER BY account_id;

-- name: HoldsCaptureForDecisions :many
-- In the billing transaction, after the chunk's usage entries are inserted: captures, in one
-- statement, the holds named by the chunk's decisions (after_seq, upto_seq] of the locked accounts
-- (account_ids, locked in id order by the chunk) that are still held and that the decision was
-- received while live, with captured_amount = least(cost, amount), and releases what each hold reserved
-- (on its account amount - pooled, on each pool its reservation: the pools are locked with their members,
-- roots first; LedgerAppendForDecisions let the decision draw it); in the spend windows that counted each hold, its amount leaves held and its
-- captured amount is spent (what the decision cost beyond it is counted by SpendWindowsBill). Those decisions were billed by this transaction or an earlier one, and
-- a hold is captured the first time billing reads it held with its decision: normally with the bill,
-- and never twice, since only a hold still held is touched. A hold already captured, voided or expired
-- is left as it was. Two decisions naming one hold capture it once, by the first (lowest seq).
-- Returns each hold captured with its decision's cost.
WITH named AS (
    SELECT DISTINCT ON (d.account_id, d.hold_id) d.id, d.account_id, d.hold_id, d.cost, d.received_at
    FROM decisions d
    -- A join (hashed), as in LedgerUsageInsertForDecisions; decisions without a hold cost one range scan.
    JOIN unnest(@account_ids::text[]) AS locked (account_id) ON locked.account_id = d.account_id
    WHERE d.seq > @after_seq::bigint
      AND d.seq <= @upto_seq::bigint
      AND d.hold_id IS NOT NULL
    ORDER BY d.account_id, d.hold_id, d.seq
), captured AS (
    UPDATE holds h
    SET status = 'captured', captured_amount = least(n.cost, h.amount), decision_id = n.id, resolved_at = now()
    FROM named n
    WHERE h.account_id = n.account_id
      AND h.id = n.hold_id
      AND h.status = 'held'
      AND n.received_at BETWEEN h.created_at AND h.expires_at
    RETURNING h.account_id, h.id, h.amount, h.pooled, h.captured_amount, h.created_at, h.limit_ids, h.window_starts,
              n.id AS decision_id, n.cost
), released AS (
    -- Runs to completion although nothing reads it, as every data-modifying WITH does.
    UPDATE accounts a
    SET held = a.held - p.released
    FROM (
        -- Each level what it reserved, as in HoldsExpire.
        SELECT x.account_id, sum(x.amount) AS released
        FROM (
            SELECT c.account_id, c.amount - c.pooled AS amount FROM captured c
            UNION ALL
            SELECT r.pool_id, r.amount
            FROM captured c
            JOIN hold_reservations r ON r.account_id = c.account_id AND r.hold_id = c.id
            WHERE c.pooled > 0
        ) x
        GROUP BY x.account_id
        HAVING sum(x.amount) > 0
    ) p
    WHERE a.id = p.account_id
), windows_moved AS (
    -- In the spend windows each hold was counted in: its amount leaves held, what it captured is spent.
    UPDATE spend_windows w
    SET held = w.held - c.released, spent = w.spent + c.captured
    FROM (
        SELECT h.account_id, l.id AS limit_id, h.window_starts[k] AS window_start, sum(h.amount) AS released,
               sum(h.captured_amount) AS captured
        FROM captured h
        CROSS JOIN LATERAL generate_subscripts(h.limit_ids, 1) AS k
        JOIN spend_limits l ON l.account_id = h.account_id AND l.id = h.limit_ids[k] AND l.created_at <= h.created_at
        -- A hold that counted in no window is left out before the join: the planner, which cannot
        -- estimate a WITH's rows, would otherwise probe spend_limits once per hold captured.
        WHERE cardinality(h.limit_ids) > 0
        GROUP BY h.account_id, l.id, h.window_starts[k]
    ) c
    WHERE w.account_id = c.account_id
      AND w.limit_id = c.limit_id
      AND w.window_start = c.window_start
)
SELECT account_id, id, amount, decision_id, cost
FROM captured;

-- name: HoldsReleasePools :many
-- Releases what a resolved hold reserved on its pools (SPEC §18), in the transaction that moved it out of
-- held, the pools locked with the member (roots first): each pool's held less its reservation
-- (accounts_held_nonnegative_check refuses a release that was never reserved). Returns each pool
-- released with its reservation and depth (the nearest pool is the deepest); none for a hold that
-- reserved on no pool.
-- The reservations are read apart: on Citus each pool's row is on its own shard, not the member's.
WITH r AS MATERIALIZED (
    SELECT pool_id, amount
    FROM hold_reservations
    WHERE account_id = @account_id
      AND hold_id = @hold_id
)
UPDATE accounts a
SET held = a.held - r.amount
FROM r
WHERE a.id = r.pool_id
RETURNING r.pool_id::text AS pool_id, r.amount::bigint AS amount, a.depth::int AS depth;

-- name: HoldsHeldMismatches :many
-- Accounts whose held differs from what their holds still held reserved on them (verify): amount -
-- pooled of each of their own, and each reservation of their members' (hold_reservations, SPEC §18).
-- Empty when the invariant holds.
SELECT a.id, a.held AS cached, coalesce(h.total, 0)::bigint AS holds_sum
FROM accounts a
LEFT JOIN (
    SELECT x.account_id, sum(x.amount) AS total
    FROM (
        SELECT account_id, amount - pooled AS amount
        FROM holds
        WHERE status = 'held'
        UNION ALL
        SELECT r.pool_id, r.amount
        FROM hold_reservations r
        JOIN holds h ON h.account_id = r.account_id AND h.id = r.hold_id
        WHERE h.status = 'held'
    ) x
    GROUP BY x.account_id
) h ON h.account_id = a.id
WHERE a.held <> coalesce(h.total, 0)
ORDER BY a.id;

-- name: HoldsReservationMismatches :many
-- Holds whose reservations do not sum to their pooled, or are on an account that is not a pool of the
-- hold's account (its parent or grandparent) (verify, SPEC §18). Empty when every hold reserved as
-- planned. The tree is read apart (members' parents, then their grandparents), then joined to the
-- reservations: on Citus a parent's row is on another shard than its member's.
WITH parents AS MATERIALIZED (
    SELECT a.id, a.parent_id
    FROM accounts a
    WHERE a.parent_id IS NOT NULL
), pools AS MATERIALIZED (
    SELECT c.id, c.parent_id AS pool_id FROM parents c
    UNION ALL
    SELECT c.id, p.parent_id FROM parents c JOIN parents p ON p.id = c.parent_id
), reserved AS (
    SELECT r.account_id, r.hold_id, sum(r.amount) AS amount, count(*) FILTER (WHERE t.id IS NULL) AS elsewhere
    FROM hold_reservations r
    LEFT JOIN pools t ON t.id = r.account_id AND t.pool_id = r.pool_id
    GROUP BY r.account_id, r.hold_id
)
SELECT h.account_id, h.id, h.pooled, coalesce(r.amount, 0)::bigint AS reserved, coalesce(r.elsewhere, 0)::bigint AS elsewhere
FROM holds h
LEFT JOIN reserved r ON r.account_id = h.account_id AND r.hold_id = h.id
WHERE (h.pooled > 0 OR r.hold_id IS NOT NULL)
  AND (h.pooled <> coalesce(r.amount, 0) OR coalesce(r.elsewhere, 0) > 0)
ORDER BY 1, 2;

-- name: HoldsCaptureMismatches :many
-- Holds whose capture does not match the ledger (verify): a hold captured through the API must have
-- usage entries keyed hold:{account_id}:{id} (and, for its pools' parts, that key @{pool_id}) of
-- -captured_amount together (LedgerCascadeMismatches checks the parts one by one); a hold captured by a
-- decision, or not captured at all, must have none. An entry under such a key with no hold is reported
-- too. Empty when every hold was captured at most once.
SELECT coalesce(h.account_id, l.account_id)::text AS account_id,
       coalesce(h.id, substr(l.dedupe_key, length('hold:' || l.account_id || ':') + 1))::text AS hold_id,
       coalesce(h.status, '')::text AS status,
       coalesce(h.captured_amount, 0)::bigint AS captured_amount,
       coalesce(-l.amount, 0)::bigint AS entry_amount,
       (l.id IS NOT NULL)::boolean AS has_entry
FROM (
    SELECT account_id, id, status, captured_amount, decision_id
    FROM holds
    WHERE status = 'captured'
) h
FULL JOIN (
    -- A capture's entries: the member's, under the hold's key, and its pools' parts under
    -- {key}@{pool_id} (SPEC §18), summed.
    SELECT split_part(dedupe_key, '@', 1) AS dedupe_key, min(id) AS id,
           coalesce(min(account_id) FILTER (WHERE on_behalf_of IS NULL), min(on_behalf_of)) AS account_id,
           sum(amount) AS amount
    FROM ledger
    WHERE dedupe_key LIKE 'hold:%'
    GROUP BY 1
) l ON l.dedupe_key = 'hold:' || h.account_id || ':' || h.id
WHERE h.id IS NULL
   OR (h.decision_id IS NULL AND (l.id IS NULL OR -l.amount <> h.captured_amount))
   OR (h.decision_id IS NOT NULL AND l.id IS NOT NULL)
ORDER BY 1, 2;

-- name: HoldsOverdue :many
-- Holds still held more than grace_seconds past their expiry on the database clock (verify): the expiry pass
-- is not running, or failing.
SELECT account_id, id, amount, expires_at
FROM holds
WHERE status = 'held'
  AND expires_at < now() - make_interval(secs => @grace_seconds::double precision)
ORDER BY expires_at, account_id, id;

-- name: HoldsOpenByAccount :many
-- The account's holds still held, soonest to expire first, at most max_rows (the console's account
-- page). A hold past its time that the expiry pass has not reached yet is still held, and listed.
SELECT account_id, id, amount, status, captured_amount, decision_id, expires_at, created_at, resolved_at, subject, feature, limit_ids, window_starts, pooled
FROM holds
WHERE account_id = @account_id
  AND status = 'held'
ORDER BY expires_at, id
LIMIT @max_rows::int;

-- name: HoldsExpiringSoon :many
-- Holds of every account still held that expire within within_seconds on the database clock (or are
-- past their time, the expiry pass not there yet), soonest first, at most max_rows: the console's
-- overview. A range scan of holds_held_expires_at_idx.
SELECT account_id, id, amount, status, captured_amount, decision_id, expires_at, created_at, resolved_at, subject, feature, limit_ids, window_starts, pooled
FROM holds
WHERE status = 'held'
  AND expires_at <= now() + make_interval(secs => @within_seconds::double precision)
ORDER BY expires_at, account_id, id
LIMIT @max_rows::int;

-- name: HoldsPaidTwice :many
-- Decisions billed beyond what the capture of their hold through the API left to pay (verify): the capture
-- came first (its entry, hold:{account_id}:{hold_id}, precedes the decision's in the account's seq), so
-- the decision owes only its cost beyond the captured amount (LedgerAppendForDecisions). Empty when no
-- hold is paid twice.
SELECT d.account_id, d.id AS decision_id, coalesce(d.hold_id, '')::text AS hold_id, d.cost,
       coalesce(h.captured_amount, 0)::bigint AS captured_amount, (-e.amount)::bigint AS billed
FROM decisions d
JOIN holds h ON h.account_id = d.account_id AND h.id = d.hold_id AND h.status = 'captured' AND h.decision_id IS NULL
JOIN ledger c ON c.account_id = d.account_id AND c.dedupe_key = 'hold:' || d.account_id || ':' || d.hold_id
JOIN ledger e ON e.account_id = d.account_id AND e.dedupe_key = 'decision:' || d.id
WHERE c.seq < e.seq
  AND -e.amount > d.cost - least(d.cost, h.captured_amount)
ORDER BY d.account_id, d.id
LIMIT 1000;
