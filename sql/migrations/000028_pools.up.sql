-- Shared balances (SPEC §18): an account may have a parent, its pool. An account with a parent is a
-- member; its ancestors are its pools (an organisation, a team). The tree is held by the database:
--   accounts_parent_not_self_check  no account is its own parent;
--   accounts_depth_check            at most three levels (depth 0, 1, 2; depth = number of ancestors);
--   accounts_parent_tree            trigger: the parent exists and is not deleted while it has members
--                                   (raised as accounts_parent_fk: accounts are distributed by id on Citus,
--                                   where a foreign key to another shard is not possible, so one trigger
--                                   holds it on both backends), has the same currency and unit
--                                   (accounts_parent_currency_check), the tree has no cycle
--                                   (accounts_parent_acyclic_check), the parent never changes
--                                   (accounts_parent_immutable), and the depth is the parent's plus one.
-- The parent is set when the account is created and never changes, so the depth, derived from the
-- parent's when the row is written, stays true, and an account is deeper than every one of its ancestors.
--
-- Citus (sql/citus): accounts stay distributed by id, a tree's accounts on whatever shards their ids hash
-- to, and a cascade that draws on a pool on another node commits with two-phase commit. The other way,
-- distributing every account table by the tree's root, would change the distribution column of every
-- account table (and of the keys that include it) for the few accounts that belong to trees. Measured on
-- the local cluster (two workers, pgbench, a transaction locking and updating two accounts as a cascade
-- does): 157 tps with both on one shard, 83 tps across nodes. Billing cascades a whole chunk of decisions
-- in one transaction, so the two-phase commit is paid per chunk, not per decision (docs/scaling.md).
ALTER TABLE accounts
    ADD COLUMN parent_id text,
    ADD COLUMN depth     smallint NOT NULL DEFAULT 0;
ALTER TABLE accounts
    ADD CONSTRAINT accounts_parent_not_self_check CHECK (parent_id <> id);
ALTER TABLE accounts
    ADD CONSTRAINT accounts_depth_check CHECK (depth BETWEEN 0 AND 2 AND (depth = 0) = (parent_id IS NULL));

CREATE INDEX accounts_parent_id_idx ON accounts (parent_id) WHERE parent_id IS NOT NULL;

COMMENT ON COLUMN accounts.parent_id IS
    'The pool this account draws on when its own available runs out (SPEC §18); NULL: a root. Set at '
    'creation, never changed (trigger accounts_parent_tree).';
COMMENT ON COLUMN accounts.depth IS
    'How many ancestors the account has: 0 for a root, the parent''s depth plus one otherwise (derived by '
    'trigger accounts_parent_tree). Locks are taken roots first: by depth, then id (accounts_lock).';
COMMENT ON CONSTRAINT accounts_parent_not_self_check ON accounts IS 'No account is its own parent.';
COMMENT ON CONSTRAINT accounts_depth_check ON accounts IS
    'A tree has at most three levels (organisation, team, member): depth 0 to 2, and 0 exactly for a root.';
COMMENT ON INDEX accounts_parent_id_idx IS 'The members of a pool (GET /v1/accounts/{id}/members).';

-- accounts_parent_tree: the rules a foreign key cannot say. Walks up from the parent one row at a time
-- (at most three: each is a single-row read, a router query on Citus), so no recursive query is needed.
CREATE FUNCTION accounts_parent_tree() RETURNS trigger
    LANGUAGE plpgsql AS
$$
DECLARE
    parent_currency text;
    parent_unit     text;
    parent_depth    smallint;
    ancestor        text;
    steps           int := 0;
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF EXISTS (SELECT 1 FROM accounts c WHERE c.parent_id = OLD.id) THEN
            RAISE EXCEPTION 'account % has members: it stays', OLD.id
                USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'accounts_parent_fk',
                      TABLE = 'accounts', DETAIL = 'constraint accounts_parent_fk on table accounts';
        END IF;
        RETURN OLD;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.parent_id IS NOT DISTINCT FROM OLD.parent_id
       AND NEW.currency = OLD.currency AND NEW.depth = OLD.depth THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'INSERT' AND NEW.parent_id IS NOT NULL AND EXISTS (SELECT 1 FROM accounts a WHERE a.id = NEW.id) THEN
        -- The id exists: the insert does nothing (ON CONFLICT) or fails on accounts_pkey, and the
        -- existing account's parent is not this row's to judge (a caller compares them). Its CHECKs run
        -- before the conflict is found: a depth they accept, for a row never written.
        NEW.depth := 1;
        RETURN NEW;
    END IF;
    IF NEW.parent_id IS NULL OR NEW.parent_id = NEW.id THEN
        -- A root, or its own parent: accounts_parent_not_self_check refuses that one (depth 1, so that
        -- accounts_depth_check does not answer first).
        NEW.depth := CASE WHEN NEW.parent_id IS NULL THEN 0 ELSE 1 END;
        IF TG_OP = 'UPDATE' AND NEW.currency <> OLD.currency
           AND EXISTS (SELECT 1 FROM accounts c WHERE c.parent_id = NEW.id) THEN
            RAISE EXCEPTION 'account % has members: its currency stays %', NEW.id, OLD.currency
                USING ERRCODE = 'check_violation', CONSTRAINT = 'accounts_parent_currency_check',
                      TABLE = 'accounts', DETAIL = 'constraint accounts_parent_currency_check on table accounts';
        END IF;
        IF TG_OP = 'UPDATE' AND OLD.parent_id IS NOT NULL THEN
            RAISE EXCEPTION 'account % has parent %: it never changes', NEW.id, OLD.parent_id
                USING ERRCODE = 'check_violation', CONSTRAINT = 'accounts_parent_immutable',
                      TABLE = 'accounts', DETAIL = 'constraint accounts_parent_immutable on table accounts';
        END IF;
        RETURN NEW;
    END IF;

    SELECT p.currency, p.unit, p.depth INTO parent_currency, parent_unit, parent_depth FROM accounts p WHERE p.id = NEW.parent_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'parent % of account % does not exist', NEW.parent_id, NEW.id
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'accounts_parent_fk',
                  TABLE = 'accounts', DETAIL = 'constraint accounts_parent_fk on table accounts';
    END IF;
    -- A member draws its pool's balance as its own: the same currency, and the same unit (000024).
    IF parent_currency <> NEW.currency OR parent_unit <> NEW.unit THEN
        RAISE EXCEPTION 'account % is % (%), its parent % is % (%)', NEW.id, NEW.currency, NEW.unit,
                        NEW.parent_id, parent_currency, parent_unit
            USING ERRCODE = 'check_violation', CONSTRAINT = 'accounts_parent_currency_check',
                  TABLE = 'accounts', DETAIL = 'constraint accounts_parent_currency_check on table accounts';
    END IF;
    -- A cycle: the account is among its new parent's ancestors.
    ancestor := NEW.parent_id;
    WHILE ancestor IS NOT NULL AND steps <= 3 LOOP
        IF ancestor = NEW.id THEN
            RAISE EXCEPTION 'account % would be its own ancestor through %', NEW.id, NEW.parent_id
                USING ERRCODE = 'check_violation', CONSTRAINT = 'accounts_parent_acyclic_check',
                      TABLE = 'accounts', DETAIL = 'constraint accounts_parent_acyclic_check on table accounts';
        END IF;
        SELECT a.parent_id INTO ancestor FROM accounts a WHERE a.id = ancestor;
        steps := steps + 1;
    END LOOP;
    IF TG_OP = 'UPDATE' AND OLD.parent_id IS DISTINCT FROM NEW.parent_id THEN
        RAISE EXCEPTION 'account % has parent %: it never changes', NEW.id, coalesce(OLD.parent_id, '(none)')
            USING ERRCODE = 'check_violation', CONSTRAINT = 'accounts_parent_immutable',
                  TABLE = 'accounts', DETAIL = 'constraint accounts_parent_immutable on table accounts';
    END IF;
    -- The depth is the parent's plus one; beyond 2, accounts_depth_check refuses the row.
    NEW.depth := parent_depth + 1;
    RETURN NEW;
END;
$$;

CREATE TRIGGER accounts_parent_tree
    BEFORE INSERT OR UPDATE OF parent_id, depth, currency OR DELETE ON accounts
    FOR EACH ROW EXECUTE FUNCTION accounts_parent_tree();

COMMENT ON FUNCTION accounts_parent_tree() IS
    'Trigger accounts_parent_tree: derives depth from the parent and refuses, by constraint name, a parent '
    'that does not exist or the deletion of one that has members (accounts_parent_fk), of another currency or unit (accounts_parent_currency_check), a cycle '
    '(accounts_parent_acyclic_check), a parent set or changed after creation (accounts_parent_immutable) and '
    'a currency change of a pool with members.';
COMMENT ON TRIGGER accounts_parent_tree ON accounts IS
    'Holds the tree of pools: the parent exists and has the same currency and unit, no cycle, the parent never '
    'changes, depth = the parent''s + 1 (accounts_depth_check bounds it).';

-- Cascades (SPEC §18): a debit on a member is paid by its own available first, then its parent's, then
-- its grandparent's, each account that pays posting its own entry through the one road. The member's
-- entry is under the effect's key (decision:{id}) and carries the member's part, 0 when its pools paid it
-- all (so that the member's statement shows every effect, and a replay finds the effect's key taken);
-- each pool's entry is under {key}@{pool_id} and names the member it paid for in on_behalf_of.
ALTER TABLE ledger ADD COLUMN on_behalf_of text;
ALTER TABLE ledger
    ADD CONSTRAINT ledger_on_behalf_of_check CHECK (
        on_behalf_of IS NULL OR (on_behalf_of <> account_id AND kind = 'usage')
    ) NOT VALID;
COMMENT ON COLUMN ledger.on_behalf_of IS
    'For a pool''s part of a member''s debit: the member it paid for (the entry''s key is the member''s, '
    'decision:{id}, with @{pool_id} appended); NULL: the account paid for itself.';
COMMENT ON CONSTRAINT ledger_on_behalf_of_check ON ledger IS
    'Only a debit (usage) is paid on behalf of a member, and never on an account''s own behalf.';

-- A member's part of a cascaded debit is 0 when its pools paid it all: usage may be 0, every other kind
-- keeps its sign. NOT VALID: every existing entry passed the stricter check (000009).
ALTER TABLE ledger DROP CONSTRAINT ledger_kind_sign_check;
ALTER TABLE ledger ADD CONSTRAINT ledger_kind_sign_check CHECK (
    CASE kind
        WHEN 'topup'          THEN amount > 0
        WHEN 'grant'          THEN amount > 0
        WHEN 'refund_restore' THEN amount > 0
        WHEN 'dispute_won'    THEN amount > 0
        WHEN 'usage'          THEN amount <= 0
        WHEN 'refund'         THEN amount < 0
        WHEN 'dispute'        THEN amount < 0
        WHEN 'expiry'         THEN amount < 0
        WHEN 'void'           THEN amount < 0
        WHEN 'adjustment'     THEN amount <> 0
        ELSE false
    END
) NOT VALID;
COMMENT ON CONSTRAINT ledger_kind_sign_check ON ledger IS
    'Credits are positive and debits negative, per kind: topup, grant, refund_restore, dispute_won > 0; '
    'refund, dispute, expiry, void < 0; usage <= 0 (0: a member''s part of a debit its pools paid in full, '
    'SPEC §18); adjustment non-zero. Any other kind is refused.';

-- ledger_append gains p_on_behalf_of after p_lot_cost_currencies and returns on_behalf_of last; the rest
-- is 000024's (the cost of a credit's lot).
-- A new result type needs a new function, hence DROP and CREATE.
DROP FUNCTION ledger_append(text[], text[], bigint[], text[], text[], text[], boolean[], bigint[], text[], text[], smallint[], text[], float8[], bigint, text[], text[], bigint[], text[]);

-- ledger_append: the one road (000024's, with on_behalf_of). The arrays are one planned row each,
-- read in lockstep (those after the first five may be left out: NULL): the account, kind, amount,
-- description, dedupe key ('' or NULL: none), payment intent ('' or NULL: none), whether the row may not
-- take its account's balance below zero, the lot an expiry or void takes (0 or NULL: none), the key of
-- the reversal a restore undoes ('' or NULL: none), and for a credit (ignored for a debit) the terms of
-- its lot: category ('' or NULL: the default) and priority (NULL: the default), expiry as a timestamp
-- ('' or NULL: none) or else as a lifetime in seconds from the entry's created_at (0 or NULL: never);
-- after p_balance, who spent (subject) and on what (feature): those of the hold or decision the row is
-- posted for ('' or NULL: none); after p_features, what a credit's lot cost: its amount (NULL: 0) and
-- currency ('' or NULL: nothing was paid; the amount is then ignored); after those, the member a pool's
-- row pays for ('' or NULL: none).
CREATE FUNCTION ledger_append(
    p_account_ids     text[],
    p_kinds           text[],
    p_amounts         bigint[],
    p_descriptions    text[],
    p_dedupe_keys     text[],
    p_payment_intents text[]     DEFAULT NULL,
    p_no_overdraw     boolean[]  DEFAULT NULL,
    p_lot_ids         bigint[]   DEFAULT NULL,
    p_reverses        text[]     DEFAULT NULL,
    p_lot_categories  text[]     DEFAULT NULL,
    p_lot_priorities  smallint[] DEFAULT NULL,
    p_lot_expires_at  text[]     DEFAULT NULL,
    p_lot_ttls        float8[]   DEFAULT NULL,
    p_balance         bigint     DEFAULT NULL,
    p_subjects        text[]     DEFAULT NULL,
    p_features        text[]     DEFAULT NULL,
    p_lot_cost_amounts    bigint[] DEFAULT NULL,
    p_lot_cost_currencies text[]   DEFAULT NULL,
    p_on_behalf_of        text[]   DEFAULT NULL
)
    RETURNS TABLE (
        k bigint, id bigint, account_id text, kind text, amount bigint, description text, dedupe_key text,
        payment_intent text, seq bigint, balance_after bigint, created_at timestamptz, lot_id bigint,
        reverses_entry_id bigint, subject text, feature text, on_behalf_of text
    )
    LANGUAGE plpgsql AS
$fn$
DECLARE
    locked_ids      text[];
    locked_seqs     bigint[];
    locked_balances bigint[];
    taken           text[];
    reversal_keys   text[];
    reversal_ids    bigint[];
    a_k             bigint[];
    a_accounts      text[];
    a_seqs          bigint[];
    a_balances      bigint[];
    a_keys          text[];
    claimed         text[];
    all_claimed     boolean;
    accounts        text[];
    batch           text[];
BEGIN
    -- 1. Lock the plan's accounts, in id order (with p_balance, only if the balance is still that).
    SELECT coalesce(array_agg(a.id ORDER BY a.id), '{}'), coalesce(array_agg(a.last_seq ORDER BY a.id), '{}'),
           coalesce(array_agg(a.balance ORDER BY a.id), '{}')
    INTO locked_ids, locked_seqs, locked_balances
    FROM accounts_lock(p_account_ids, p_balance) AS a;
    IF cardinality(locked_ids) = 0 THEN
        RETURN;
    END IF;

    -- 2. Under the locks: the keys entries hold already, and the reversals restores undo (read on their
    -- own, so that on Citus each is one distributed statement).
    taken := ARRAY(
        SELECT t FROM ledger_keys_taken(ARRAY(
            SELECT DISTINCT nullif(x, '') FROM unnest(p_dedupe_keys) AS x WHERE nullif(x, '') IS NOT NULL
        )) AS t
    );
    IF EXISTS (SELECT 1 FROM unnest(p_reverses) AS x WHERE nullif(x, '') IS NOT NULL) THEN
        SELECT coalesce(array_agg(r.dedupe_key), '{}'), coalesce(array_agg(r.id), '{}')
        INTO reversal_keys, reversal_ids
        FROM ledger r
        JOIN unnest(p_account_ids, p_reverses) AS x (account_id, key)
            ON r.account_id = x.account_id AND r.dedupe_key = x.key
        WHERE r.dedupe_key = ANY(p_reverses);
    END IF;

    -- 3. The plan: a row is inserted when its account is locked, its key (if any) is neither taken nor
    -- held by an earlier row of the plan, and no row of its account flagged no_overdraw would leave the
    -- balance below zero. Each account's rows are numbered from its last_seq in plan order, each with
    -- balance_after = balance + the running sum (a numeric: a balance beyond a bigint fails the cast,
    -- numeric_value_out_of_range, and with it the whole call).
    WITH plan AS (
        SELECT p.k, p.account_id, p.amount, nullif(p.dedupe_key, '') AS dedupe_key, coalesce(p.no_overdraw, false) AS no_overdraw,
               row_number() OVER (PARTITION BY nullif(p.dedupe_key, '') ORDER BY p.k) AS nth
        FROM unnest(p_account_ids, p_amounts, p_dedupe_keys, p_no_overdraw)
            WITH ORDINALITY AS p (account_id, amount, dedupe_key, no_overdraw, k)
    ), chained AS (
        SELECT p.k, p.account_id, p.dedupe_key, p.no_overdraw,
               a.last_seq + row_number() OVER w AS seq,
               a.balance + sum(p.amount::numeric) OVER w AS balance_after
        FROM plan p
        JOIN unnest(locked_ids, locked_seqs, locked_balances) AS a (id, last_seq, balance) ON a.id = p.account_id
        WHERE p.dedupe_key IS NULL OR (p.nth = 1 AND NOT p.dedupe_key = ANY(taken))
        WINDOW w AS (PARTITION BY p.account_id ORDER BY p.k ROWS UNBOUNDED PRECEDING)
    ), judged AS (
        -- A window, not NOT EXISTS over chained: from a session's sixth call plpgsql plans this statement
        -- generically, taking the arrays for a few rows, and the anti join became a nested loop, n * n for
        -- a billing chunk of n decisions.
        SELECT c.*, bool_or(c.no_overdraw AND c.balance_after < 0) OVER (PARTITION BY c.account_id) AS overdrawn
        FROM chained c
    )
    SELECT coalesce(array_agg(c.k ORDER BY c.account_id, c.seq), '{}'),
           coalesce(array_agg(c.account_id ORDER BY c.account_id, c.seq), '{}'),
           coalesce(array_agg(c.seq ORDER BY c.account_id, c.seq), '{}'),
           coalesce(array_agg(c.balance_after::bigint ORDER BY c.account_id, c.seq), '{}'),
           coalesce(array_agg(c.dedupe_key ORDER BY c.account_id, c.seq), '{}')
    INTO a_k, a_accounts, a_seqs, a_balances, a_keys
    FROM judged c
    WHERE NOT c.overdrawn;
    IF cardinality(a_k) = 0 THEN
        RETURN;
    END IF;

    -- 4. Claim the keys of the rows to insert (on Citus; on plain PostgreSQL the insert is checked by
    -- ledger_dedupe_idx). A key not claimed (a concurrent posting claimed it first) is not inserted.
    claimed := ARRAY(
        SELECT claim_keys(
            ARRAY(SELECT x FROM unnest(a_keys) AS x WHERE x IS NOT NULL),
            ARRAY(SELECT x.account_id FROM unnest(a_keys, a_accounts) AS x (key, account_id) WHERE x.key IS NOT NULL)
        )
    );
    -- Every key claimed (always on plain PostgreSQL): no row needs its key looked up in claimed.
    all_claimed := cardinality(claimed) = (SELECT count(*) FROM unnest(a_keys) AS x WHERE x IS NOT NULL);
    accounts := ARRAY(SELECT DISTINCT x FROM unnest(a_accounts) AS x ORDER BY x);

    -- 5. Insert, in each account's seq order, a batch of accounts at a time (ledger_batches: all at once on
    -- plain PostgreSQL). ON CONFLICT DO NOTHING: a key inserted meanwhile by a
    -- transaction this one waited for is skipped; if it was not its account's last row, the hole it leaves
    -- fails the statement in ledger_chain, so no wrong chain is ever left. (No arbiter is named: the key's
    -- index is ledger_dedupe_idx here and per account on Citus; the other unique keys, the id and
    -- (account_id, seq) under the account lock, cannot conflict, and a row they skipped would be missing
    -- from the answer and break the chain the same way.) created_at is taken per row under the lock, and a
    -- lot lifetime runs from it.
    FOR batch IN SELECT b FROM ledger_batches(accounts) AS b LOOP
    RETURN QUERY
    WITH planned AS (
        SELECT r.k, r.account_id, r.seq, r.balance_after, r.dedupe_key, clock_timestamp() AS at
        FROM unnest(a_k, a_accounts, a_seqs, a_balances, a_keys) AS r (k, account_id, seq, balance_after, dedupe_key)
        -- all_claimed and a batch of every account first: OR stops at them, and = ANY, a linear search
        -- of the array per row, runs only for the rows it must decide.
        WHERE (all_claimed OR r.dedupe_key IS NULL OR r.dedupe_key = ANY(claimed))
          AND (cardinality(batch) = cardinality(accounts) OR r.account_id = ANY(batch))
        ORDER BY r.account_id, r.seq
    ), inserted AS (
        INSERT INTO ledger AS l (account_id, kind, amount, description, dedupe_key, payment_intent, seq, balance_after,
                                 created_at, lot_id, reverses_entry_id, lot_category, lot_priority, lot_expires_at,
                                 subject, feature, lot_cost_amount, lot_cost_currency, on_behalf_of)
        SELECT r.account_id, p_kinds[r.k], p_amounts[r.k], coalesce(p_descriptions[r.k], ''), r.dedupe_key,
               nullif(p_payment_intents[r.k], ''), r.seq, r.balance_after, r.at, nullif(p_lot_ids[r.k], 0),
               reversal_ids[array_position(reversal_keys, nullif(p_reverses[r.k], ''))],
               -- Lot terms: a credit's only.
               CASE WHEN p_amounts[r.k] > 0 THEN nullif(p_lot_categories[r.k], '') END,
               CASE WHEN p_amounts[r.k] > 0 THEN p_lot_priorities[r.k] END,
               CASE WHEN p_amounts[r.k] > 0 THEN
                   coalesce(nullif(p_lot_expires_at[r.k], '')::timestamptz,
                            r.at + make_interval(secs => nullif(p_lot_ttls[r.k], 0)))
               END,
               nullif(p_subjects[r.k], ''), nullif(p_features[r.k], ''),
               -- A credit's cost: with a currency, or none at all (cost 0).
               CASE WHEN p_amounts[r.k] > 0 AND nullif(p_lot_cost_currencies[r.k], '') IS NOT NULL
                    THEN coalesce(p_lot_cost_amounts[r.k], 0) END,
               CASE WHEN p_amounts[r.k] > 0 THEN nullif(p_lot_cost_currencies[r.k], '') END,
               nullif(p_on_behalf_of[r.k], '')
        FROM planned r
        ORDER BY r.account_id, r.seq
        ON CONFLICT DO NOTHING
        RETURNING l.id, l.account_id, l.kind, l.amount, l.description, l.dedupe_key, l.payment_intent, l.seq,
                  l.balance_after, l.created_at, l.lot_id, l.reverses_entry_id, l.subject, l.feature, l.on_behalf_of
    )
    SELECT r.k, i.id, i.account_id, i.kind, i.amount, i.description, i.dedupe_key, i.payment_intent, i.seq,
           i.balance_after, i.created_at, i.lot_id, i.reverses_entry_id, i.subject, i.feature, i.on_behalf_of
    FROM inserted i
    JOIN planned r ON r.account_id = i.account_id AND r.seq = i.seq
    ORDER BY i.account_id, i.seq;
    END LOOP;

    -- 6. A restore that refilled a lot that is closed or past its expiry (ledger_lots closed it): that
    -- credit goes at once, as an expiry, or as a void when the lot was closed before its time. Posted
    -- through this same road, keyed by lot and restore, and returned with k NULL.
    IF 'refund_restore' = ANY(p_kinds) OR 'dispute_won' = ANY(p_kinds) THEN
        RETURN QUERY
        SELECT NULL::bigint, g.id, g.account_id, g.kind, g.amount, g.description, g.dedupe_key, g.payment_intent,
               g.seq, g.balance_after, g.created_at, g.lot_id, g.reverses_entry_id, g.subject, g.feature,
               g.on_behalf_of
        FROM (
            SELECT array_agg(x.account_id ORDER BY x.account_id, x.seq, x.lot) AS accounts,
                   array_agg(x.kind ORDER BY x.account_id, x.seq, x.lot) AS kinds,
                   array_agg(-x.remaining ORDER BY x.account_id, x.seq, x.lot) AS amounts,
                   array_agg(x.kind || ' of lot ' || x.lot || ' refilled by entry ' || x.entry
                             ORDER BY x.account_id, x.seq, x.lot) AS descriptions,
                   array_agg(CASE x.kind WHEN 'expiry' THEN 'expire:' ELSE 'void:' END || x.lot || ':' || x.entry
                             ORDER BY x.account_id, x.seq, x.lot) AS keys,
                   array_agg(x.lot ORDER BY x.account_id, x.seq, x.lot) AS lots
            FROM (
                SELECT e.account_id, e.seq, e.id AS entry, l.id AS lot, l.remaining,
                       CASE WHEN l.expires_at <= e.created_at THEN 'expiry' ELSE 'void' END AS kind
                FROM ledger e
                JOIN lot_refills f ON f.account_id = e.account_id AND f.entry_id = e.id
                JOIN credit_lots l ON l.account_id = f.account_id AND l.id = f.lot_id
                JOIN unnest(a_accounts, a_seqs) AS n (account_id, seq) ON n.account_id = e.account_id AND n.seq = e.seq
                WHERE e.account_id = ANY(a_accounts)
                  AND e.kind IN ('refund_restore', 'dispute_won')
                  AND l.closed_at IS NOT NULL AND l.remaining > 0
            ) x
            HAVING count(*) > 0
        ) gone
        CROSS JOIN LATERAL ledger_append(gone.accounts, gone.kinds, gone.amounts, gone.descriptions, gone.keys,
                                         p_lot_ids => gone.lots) AS g;
    END IF;
END;
$fn$;

COMMENT ON FUNCTION ledger_append(text[], text[], bigint[], text[], text[], text[], boolean[], bigint[], text[], text[], smallint[], text[], float8[], bigint, text[], text[], bigint[], text[], text[]) IS
    'The one road into the ledger: inserts planned entries (arrays in lockstep) after locking their accounts '
    'in id order, numbering each account''s rows from last_seq with balance_after from the locked balance, '
    'leaving out rows whose key is taken and the rows of an account whose no-overdraw row would go below zero, '
    'then posts the at-once expiry of any lot a restore refilled after it closed. Stores on each entry the '
    'subject and feature of the hold or decision it is posted for, on a credit what its lot cost, and on a '
    'pool''s entry the member it paid for (on_behalf_of). Returns each inserted entry with the '
    'position (k) of its planned row; an entry it posted on its own (that expiry) has k NULL.';


-- accounts_lock (000012's) locks roots first: by depth, then id. A cascade locks a member with its pools,
-- and every other path locks in this same one order, so that none deadlocks with another (SPEC §18).
-- Unchanged for accounts without pools, all of depth 0: id order, as before.
CREATE OR REPLACE FUNCTION accounts_lock(p_ids text[], p_balance bigint DEFAULT NULL)
    RETURNS TABLE (id text, last_seq bigint, balance bigint, held bigint)
    LANGUAGE sql AS
$$
SELECT a.id, a.last_seq, a.balance, a.held
FROM accounts a
WHERE a.id = ANY(p_ids)
  AND (p_balance IS NULL OR a.balance = p_balance)
ORDER BY a.depth, a.id
FOR NO KEY UPDATE;
$$;

COMMENT ON FUNCTION accounts_lock(text[], bigint) IS
    'Locks the existing accounts among p_ids roots first, by depth then id (FOR NO KEY UPDATE: other '
    'entries'' foreign-key checks stay free) and returns them as locked. With p_balance, only an account '
    'whose balance is still p_balance is locked and returned: after waiting for another transaction''s lock, '
    'the balance is checked again on the row that transaction left. On Citus (sql/citus) one row lock per '
    'account, in the same order.';

-- lots_draw (000024's) leaves out the demands of 0: a member's part is 0 when its pools paid all of it
-- (its entry is posted all the same, so that every pool's part has its member's), and a demand of 0 after
-- another of the same account in one statement would otherwise draw 0 of the lot it falls inside.
CREATE OR REPLACE FUNCTION lots_draw(p_accounts text[], p_entries bigint[], p_seqs bigint[], p_needs bigint[], p_first_lot bigint,
                          p_repay boolean, p_kinds text[], p_postings bigint[], p_ats timestamptz[])
    RETURNS void
    LANGUAGE sql AS
$$
WITH demand AS (
    SELECT d.account_id, d.entry_id, d.seq, d.need,
           CASE d.kind WHEN 'refund' THEN 'refunded' WHEN 'dispute' THEN 'disputed' ELSE 'recognised' END AS recognition,
           d.posting, d.at,
           sum(d.need) OVER (PARTITION BY d.account_id ORDER BY d.seq ROWS UNBOUNDED PRECEDING) - d.need AS lo
    FROM unnest(p_accounts, p_entries, p_seqs, p_needs, p_kinds, p_postings, p_ats)
        AS d (account_id, entry_id, seq, need, kind, posting, at)
    -- A member's part of 0 (its pools paid it all) draws nothing: inside a lot, it would draw 0.
    WHERE d.need > 0
), totals AS (
    SELECT account_id, sum(need) AS total FROM demand GROUP BY account_id
), supply AS MATERIALIZED (
    -- Per account (a lateral: many small in-memory sorts, not one sort of every lot), and only the
    -- lots the demands reach: a chunk of usage rarely gets past the first.
    SELECT t.account_id, s.lot_id, s.remaining, s.lo, s.amount, s.cost_amount, s.cost_currency
    FROM totals t
    CROSS JOIN LATERAL (
        SELECT l.id AS lot_id, l.remaining, l.amount, l.cost_amount, l.cost_currency,
               sum(l.remaining) OVER (
                   ORDER BY coalesce(l.id = p_first_lot, false) DESC, l.priority, l.expires_at NULLS LAST,
                            l.category = 'paid', l.id
                   ROWS UNBOUNDED PRECEDING) - l.remaining AS lo
        FROM credit_lots l
        WHERE l.account_id = t.account_id AND l.closed_at IS NULL AND l.remaining > 0
    ) s
    WHERE s.lo < t.total
), draws AS MATERIALIZED (
    SELECT d.account_id, d.entry_id, s.lot_id,
           (least(d.lo + d.need, s.lo + s.remaining) - greatest(d.lo, s.lo))::bigint AS amount,
           d.lo AS demand_lo, d.recognition, d.posting, d.at,
           s.amount AS lot_amount, s.amount - s.remaining AS drawn_before, s.cost_amount, s.cost_currency
    FROM demand d
    JOIN supply s ON s.account_id = d.account_id AND s.lo < d.lo + d.need AND d.lo < s.lo + s.remaining
), drawn AS (
    -- New debits draw for the first time: a plain insert (billing's path).
    INSERT INTO lot_draws (account_id, entry_id, lot_id, amount)
    SELECT account_id, entry_id, lot_id, amount FROM draws WHERE NOT p_repay
), redrawn AS (
    -- A repaid debit may draw again from a lot it drew before (refilled since): add to that row.
    INSERT INTO lot_draws (account_id, entry_id, lot_id, amount)
    SELECT account_id, entry_id, lot_id, amount FROM draws WHERE p_repay
    ON CONFLICT (account_id, entry_id, lot_id) DO UPDATE SET amount = lot_draws.amount + excluded.amount
), recognised AS (
    -- Each draw of a priced lot, in the order the demands take the lot: the lot's drawn credits after
    -- it, and the cost that recognised.
    INSERT INTO revenue_recognitions (account_id, lot_id, entry_id, posting_entry_id, kind, credits, drawn_after,
                                      amount, currency, created_at)
    SELECT m.account_id, m.lot_id, m.entry_id, m.posting, m.recognition, m.amount, m.drawn_after,
           (div(m.cost_amount::numeric * m.drawn_after, m.lot_amount)
            - div(m.cost_amount::numeric * (m.drawn_after - m.amount), m.lot_amount))::bigint,
           m.cost_currency, m.at
    FROM (
        SELECT w.*, w.drawn_before + sum(w.amount) OVER (
                   PARTITION BY w.account_id, w.lot_id ORDER BY w.demand_lo ROWS UNBOUNDED PRECEDING) AS drawn_after
        FROM draws w
        WHERE w.cost_amount > 0
    ) m
), lots AS (
    UPDATE credit_lots l
    SET remaining = l.remaining - t.amount
    FROM (SELECT account_id, lot_id, sum(amount)::bigint AS amount FROM draws GROUP BY account_id, lot_id) t
    WHERE l.account_id = t.account_id AND l.id = t.lot_id
), uncovered AS MATERIALIZED (
    SELECT d.account_id, d.entry_id, d.seq, (d.need - coalesce(w.amount, 0))::bigint AS uncovered
    FROM demand d
    LEFT JOIN (SELECT account_id, entry_id, sum(amount) AS amount FROM draws GROUP BY account_id, entry_id) w
        ON w.account_id = d.account_id AND w.entry_id = d.entry_id
), owed AS (
    INSERT INTO lot_debts (account_id, entry_id, seq, uncovered)
    SELECT account_id, entry_id, seq, uncovered FROM uncovered WHERE uncovered > 0
    ON CONFLICT (account_id, entry_id) DO UPDATE SET uncovered = excluded.uncovered
)
DELETE FROM lot_debts x
USING uncovered u
WHERE u.uncovered = 0 AND x.account_id = u.account_id AND x.entry_id = u.entry_id;
$$;
