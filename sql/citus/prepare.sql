-- Scale-out on Citus (SPEC §15): what `onceledger migrate up` runs on a database with the citus extension,
-- after the migrations and before it distributes the tables (db/citus.go: accounts by id, every table of an
-- account's data by account_id colocated with accounts, stripe_events by event_id, dedupe_claims by
-- dedupe_key). Plain PostgreSQL never runs this file: there ledger_dedupe_idx, ledger_chain and ledger_lots
-- stay exactly as the migrations made them.
--
-- It runs on EVERY `migrate up`, and running it again is harmless: each change below is made only when it
-- is not made yet, and each function is created or replaced. So a migration that later redefines one of
-- the functions this file gives a Citus form of (on a cluster, a migration runs on the coordinator as on
-- plain PostgreSQL) gets its Citus form back in the same `migrate up`. Each such function names, in a
-- "mirrors" line, the migration whose plain form it follows and a SHA-256 of that form's text;
-- TestCitusFormsFollowTheirMigrations fails when a migration changes a mirrored function, until its Citus
-- form here is reviewed and its line updated.
--
-- Citus requires every unique key of a distributed table to include its distribution column, so the
-- global keys become per account (per event for stripe_events). One of them carries the seed's guarantee,
-- ledger_dedupe_idx: an effect is posted at most once GLOBALLY. Two designs keep it:
--   (a) the ledger distributed by dedupe_key, so that the seed's index holds verbatim; or
--   (b) the ledger distributed by account_id, colocated with accounts, and a table dedupe_claims
--       distributed by dedupe_key, claimed with INSERT ... ON CONFLICT (dedupe_key) DO NOTHING RETURNING in
--       the posting's transaction (a multi-shard transaction, committed with two-phase commit).
-- We chose (b). Both were measured on a coordinator and two workers on one machine before this file was
-- written: billing ran about 1.5x faster with (b) than with (a). And (a) would scatter an account's entries
-- over every shard, so that the chain (seq, balance_after, moved with accounts.balance under the account's
-- row lock) could no longer be held by a trigger on the shard that holds the account: every posting would
-- be a cross-node transaction anyway, and the chain check a cross-shard query.
--
-- The one road is the same function on both backends: ledger_append. What differs is what it calls:
-- accounts_lock (Citus locks rows only in single-shard statements: one statement per shard, by depth,
-- shard and id),
-- ledger_keys_taken and claim_keys (the keys are claimed in dedupe_claims), ledger_insert (the entries go
-- to their shards as literal VALUES) and stripe_events_lock_parked (one event at a time). No Citus
-- statement inserts entries of its own. An entry is read back by its key through ledger_by_keys, which
-- on Citus waits for a claim's writer still committing on another node. The webhook's read before a
-- Checkout Session's transaction, checkout_state, reads each row on its one shard, a group of
-- deliveries records its events (stripe_events_insert_group) as an INSERT ... VALUES split by shard, and
-- orders are paid (topups_pay) by statements of literal VALUES too.
--
-- The chain and the lots: ledger_chain and ledger_lots are statement-level triggers reading their
-- transition table. Citus runs a distributed table's triggers on its shards, once per statement a shard
-- receives, with the transition table of the rows that shard got. There a statement naming a distributed
-- table is planned by Citus, which cannot hand it the transition table ("executor could not find named
-- tuplestore"), and whose planning of a statement per row costs tens of times the row's own work. So the
-- Citus forms below keep the triggers and their rules, set-based as on plain PostgreSQL, and name the
-- colocated shards of the account tables instead (shard_of: all on this node, one shard each, since every
-- entry of a shard's statement is on this shard's accounts): PostgreSQL plans those statements itself,
-- with the transition table.

-- The append-only refusal names the logical table, not the shard the trigger runs on, and says so in its
-- detail too (the one field Citus relays from a shard), so that the application recognises it
-- (db.MapError) as on plain PostgreSQL.
-- mirrors ledger_refuse_change of 000031_baseline.up.sql sha256 329acea747bc9242f11bbbf0a392317bc4451747c386d61eb5dc89bdf5781af5
CREATE OR REPLACE FUNCTION ledger_refuse_change() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    RAISE EXCEPTION 'ledger entries are append-only: % refused', TG_OP
        USING ERRCODE = 'restrict_violation',
              CONSTRAINT = 'ledger_append_only',
              TABLE = 'ledger',
              -- Citus relays a shard's error without its constraint and table fields, but with its detail.
              DETAIL = 'constraint ledger_append_only on table ledger',
              HINT = 'Post a compensating entry instead.';
END;
$$;

COMMENT ON FUNCTION ledger_refuse_change() IS
    'Raises restrict_violation naming constraint ledger_append_only on table ledger for any UPDATE, DELETE '
    'or TRUNCATE of the ledger (on Citus, run on each shard).';

-- shard_of names the shard of a table of an account's data (accountTables, colocated with accounts)
-- that holds the account.
CREATE OR REPLACE FUNCTION shard_of(p_table regclass, p_account_id text)
    RETURNS text
    LANGUAGE sql STABLE AS
$$
SELECT shard_name(p_table, get_shard_id_for_distribution_column(p_table, p_account_id));
$$;

COMMENT ON FUNCTION shard_of(regclass, text) IS
    'On Citus: the name of the shard of p_table (an account table, colocated with accounts) that holds '
    'p_account_id, for statements run on that shard''s node by the triggers of the colocated ledger shard.';

-- Earlier forms of this file made both triggers row-level.
DROP TRIGGER IF EXISTS ledger_chain ON ledger;
DROP FUNCTION IF EXISTS ledger_chain_advance_entry();

-- mirrors ledger_chain_advance of 000031_baseline.up.sql sha256 9a7275615c7dffe6f13f1746b251b5fbd28c6ea3d9709165e62840caf9c5fb39
CREATE OR REPLACE FUNCTION ledger_chain_advance() RETURNS trigger
    LANGUAGE plpgsql AS
$$
DECLARE
    account         text;
    accounts_shard  text;
    posted_accounts bigint;
    moved_accounts  bigint;
BEGIN
    -- A statement that inserted no entry (every one left out by its key) moves nothing, and has no
    -- account to name a shard by.
    SELECT min(account_id) INTO account FROM new_entries;
    IF account IS NULL THEN
        RETURN NULL;
    END IF;
    accounts_shard := shard_of('accounts', account);
    EXECUTE format($sql$
        WITH steps AS (
            SELECT account_id, seq, amount, balance_after,
                   -- Each entry continues the one before it in the statement.
                   coalesce(balance_after - amount = lag(balance_after) OVER w, true) AS linked,
                   CASE WHEN lead(seq) OVER w IS NULL THEN balance_after END AS closing
            FROM new_entries
            WINDOW w AS (PARTITION BY account_id ORDER BY seq)
        ), per_account AS (
            SELECT account_id, count(*) AS entries, min(seq) AS first_seq, max(seq) AS last_seq,
                   sum(amount::numeric) AS total, bool_and(linked) AS linked, max(closing) AS closing
            FROM steps
            GROUP BY account_id
        ), moved AS (
            UPDATE %s a
            SET balance = p.closing, last_seq = p.last_seq
            FROM per_account p
            WHERE a.id = p.account_id
              AND p.linked
              AND p.first_seq = a.last_seq + 1
              AND p.last_seq = a.last_seq + p.entries
              AND p.closing = a.balance + p.total
            RETURNING a.id
        )
        SELECT (SELECT count(*) FROM per_account), (SELECT count(*) FROM moved)$sql$, accounts_shard)
    INTO posted_accounts, moved_accounts;
    IF moved_accounts <> posted_accounts THEN
        RAISE EXCEPTION 'ledger entries do not continue their account''s chain'
            USING ERRCODE = 'check_violation',
                  CONSTRAINT = 'ledger_chain',
                  TABLE = 'ledger',
                  DETAIL = 'constraint ledger_chain on table ledger',
                  HINT = 'seq must run from accounts.last_seq + 1 without holes, and balance_after from '
                         'accounts.balance by each amount; lock the account row before inserting.';
    END IF;
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION ledger_chain_advance() IS
    'On Citus, after each statement a ledger shard receives: moves the colocated accounts shard''s rows to '
    'each account''s last seq and balance_after, or raises check_violation naming constraint ledger_chain on '
    'table ledger (in its detail too, which Citus relays) when the entries do not continue their account''s '
    'chain exactly. The rule of the plain form, with the accounts shard named.';

CREATE TRIGGER ledger_chain
    AFTER INSERT ON ledger
    REFERENCING NEW TABLE AS new_entries
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_chain_advance();

COMMENT ON TRIGGER ledger_chain ON ledger IS
    'On Citus, as on plain PostgreSQL: the chain rule and the cached balance are held by the database, per '
    'statement on each shard: every entry must continue its account''s seq and balance_after from '
    'accounts.last_seq and accounts.balance, which this trigger then moves.';

-- Credit lots. lots_draw on Citus: the same allocation (running sums of
-- demands in seq order against lots in draw order), set-based over every account of the call, on the
-- shards of credit_lots, lot_draws and lot_debts that hold them. Every caller runs on the node of those
-- accounts' shards with accounts of one shard: ledger_lots for the entries of a ledger shard's
-- statement, lots_repay and lots_apply_entry for one account.
-- mirrors lots_draw of 000031_baseline.up.sql sha256 710c1a31496d9be3e4ddffe99774ee3d0b1f64da6cc60b2e0b70fb0c21614b8d
-- Earlier forms of this file, and schemas before version 24, gave lots_draw six arguments.
DROP FUNCTION IF EXISTS lots_draw(text[], bigint[], bigint[], bigint[], bigint, boolean);
CREATE OR REPLACE FUNCTION lots_draw(p_accounts text[], p_entries bigint[], p_seqs bigint[], p_needs bigint[], p_first_lot bigint,
                                     p_repay boolean, p_kinds text[], p_postings bigint[], p_ats timestamptz[])
    RETURNS void
    LANGUAGE plpgsql AS
$$
DECLARE
    account text := p_accounts[1];
BEGIN
    IF account IS NULL THEN
        RETURN;
    END IF;
    IF EXISTS (
        SELECT 1 FROM unnest(p_accounts) a
        WHERE get_shard_id_for_distribution_column('accounts', a) <> get_shard_id_for_distribution_column('accounts', account)
    ) THEN
        RAISE EXCEPTION 'lots_draw on Citus draws for the accounts of one shard at a time';
    END IF;
    EXECUTE format($sql$
        WITH demand AS (
            SELECT d.account_id, d.entry_id, d.seq, d.need,
                   CASE d.kind WHEN 'refund' THEN 'refunded' WHEN 'dispute' THEN 'disputed' ELSE 'recognised' END AS recognition,
                   d.posting, d.at,
                   sum(d.need) OVER (PARTITION BY d.account_id ORDER BY d.seq ROWS UNBOUNDED PRECEDING) - d.need AS lo
            FROM unnest($1, $2, $3, $4, $7, $8, $9) AS d (account_id, entry_id, seq, need, kind, posting, at)
            -- A member's part of 0 draws nothing (pools).
            WHERE d.need > 0
        ), totals AS (
            SELECT account_id, sum(need) AS total FROM demand GROUP BY account_id
        ), supply AS MATERIALIZED (
            SELECT t.account_id, s.lot_id, s.remaining, s.lo, s.amount, s.cost_amount, s.cost_currency
            FROM totals t
            CROSS JOIN LATERAL (
                SELECT l.id AS lot_id, l.remaining, l.amount, l.cost_amount, l.cost_currency,
                       sum(l.remaining) OVER (
                           ORDER BY coalesce(l.id = $5, false) DESC, l.priority, l.expires_at NULLS LAST,
                                    l.category = 'paid', l.id
                           ROWS UNBOUNDED PRECEDING) - l.remaining AS lo
                FROM %1$s l
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
            INSERT INTO %2$s (account_id, entry_id, lot_id, amount)
            SELECT account_id, entry_id, lot_id, amount FROM draws WHERE NOT $6
        ), redrawn AS (
            INSERT INTO %2$s AS x (account_id, entry_id, lot_id, amount)
            SELECT account_id, entry_id, lot_id, amount FROM draws WHERE $6
            ON CONFLICT (account_id, entry_id, lot_id) DO UPDATE SET amount = x.amount + excluded.amount
        ), recognised AS (
            INSERT INTO %4$s (account_id, lot_id, entry_id, posting_entry_id, kind, credits, drawn_after,
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
            UPDATE %1$s l
            SET remaining = l.remaining - t.amount
            FROM (SELECT account_id, lot_id, sum(amount)::bigint AS amount FROM draws GROUP BY account_id, lot_id) t
            WHERE l.account_id = t.account_id AND l.id = t.lot_id
        ), uncovered AS MATERIALIZED (
            SELECT d.account_id, d.entry_id, d.seq, (d.need - coalesce(w.amount, 0))::bigint AS uncovered
            FROM demand d
            LEFT JOIN (SELECT account_id, entry_id, sum(amount) AS amount FROM draws GROUP BY account_id, entry_id) w
                ON w.account_id = d.account_id AND w.entry_id = d.entry_id
        ), owed AS (
            INSERT INTO %3$s AS x (account_id, entry_id, seq, uncovered)
            SELECT account_id, entry_id, seq, uncovered FROM uncovered WHERE uncovered > 0
            ON CONFLICT (account_id, entry_id) DO UPDATE SET uncovered = excluded.uncovered
        )
        DELETE FROM %3$s x
        USING uncovered u
        WHERE u.uncovered = 0 AND x.account_id = u.account_id AND x.entry_id = u.entry_id$sql$,
        shard_of('credit_lots', account), shard_of('lot_draws', account), shard_of('lot_debts', account),
        shard_of('revenue_recognitions', account))
    USING p_accounts, p_entries, p_seqs, p_needs, p_first_lot, p_repay, p_kinds, p_postings, p_ats;
END;
$$;

COMMENT ON FUNCTION lots_draw(text[], bigint[], bigint[], bigint[], bigint, boolean, text[], bigint[], timestamptz[]) IS
    'On Citus: draws the demands (account, entry, seq, amount needed, the debit''s kind, the posting entry '
    'and its time; arrays in lockstep) of accounts of one shard from their open lots in draw order '
    '(p_first_lot first, when given), on that shard''s node: lot_draws (added to for a repaid debt), the '
    'revenue_recognitions of priced lots, lots'' remaining, and lot_debts for what no lot covered. Called by '
    'ledger_lots, lots_repay and lots_apply_entry under the accounts'' row locks.';

-- Earlier forms of this file made ledger_lots row-level.
DROP TRIGGER IF EXISTS ledger_lots ON ledger;
DROP FUNCTION IF EXISTS ledger_lots_apply_entry();

-- ledger_lots on Citus: the plain form's two set-based paths (a statement of plain debits: one
-- allocation; of plain credits on accounts without debt: one insert of their lots) on the shards of the
-- statement's accounts; every other statement entry by entry through lots_apply_entry, as on plain
-- PostgreSQL (its statements are Citus's router statements to this node's shards).
-- mirrors ledger_lots_apply of 000031_baseline.up.sql sha256 66509bdf5275c3e77f4f1e24bd91b12438cbea60f5cfce4cabae6105335e2df2
CREATE OR REPLACE FUNCTION ledger_lots_apply() RETURNS trigger
    LANGUAGE plpgsql AS
$$
DECLARE
    account text;
    debt    boolean;
    e       ledger;
BEGIN
    SELECT min(account_id) INTO account FROM new_entries;
    IF account IS NULL THEN
        RETURN NULL;
    END IF;

    IF NOT EXISTS (
        SELECT 1 FROM new_entries WHERE amount > 0 OR kind IN ('refund', 'dispute', 'expiry', 'void')
    ) THEN
        PERFORM lots_draw(array_agg(account_id), array_agg(id), array_agg(seq), array_agg(-amount), NULL, false,
                          array_agg(kind), array_agg(id), array_agg(created_at))
        FROM new_entries;
        RETURN NULL;
    END IF;

    IF NOT EXISTS (SELECT 1 FROM new_entries WHERE amount < 0 OR kind IN ('refund_restore', 'dispute_won')) THEN
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s d WHERE d.account_id IN (SELECT account_id FROM new_entries))',
                       shard_of('lot_debts', account))
        INTO debt;
        IF NOT debt THEN
            -- A shard has no identity of its own: the ids come from this node's range of the table's
            -- sequence (as Citus draws them), in the order the plain form inserts.
            EXECUTE format($sql$
                INSERT INTO %s (id, account_id, entry_id, category, priority, amount, remaining, expires_at, created_at,
                                cost_amount, cost_currency)
                SELECT nextval(%L::regclass), n.*
                FROM (
                    SELECT n.account_id, n.id,
                           coalesce(n.lot_category, CASE WHEN n.kind = 'topup' THEN 'paid' ELSE 'promotional' END),
                           coalesce(n.lot_priority, 50), n.amount, n.amount, n.lot_expires_at, n.created_at,
                           coalesce(n.lot_cost_amount, 0), n.lot_cost_currency
                    FROM new_entries n
                    ORDER BY n.account_id, n.seq
                ) n$sql$, shard_of('credit_lots', account), pg_get_serial_sequence('credit_lots', 'id'));
            RETURN NULL;
        END IF;
    END IF;

    -- A shard's rows have the shard's row type (ledger_NNNNNN): the same columns as ledger.
    FOR e IN SELECT (n::text::ledger).* FROM new_entries n ORDER BY n.account_id, n.seq LOOP
        PERFORM lots_apply_entry(e);
    END LOOP;
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION ledger_lots_apply() IS
    'On Citus, after each statement a ledger shard receives (after ledger_chain): the plain form''s rules, '
    '(lot costs and revenue recognitions included), '
    'set-based on the node''s shards of the lot tables for plain debits and for plain credits without debt, '
    'entry by entry (lots_apply_entry) otherwise.';

CREATE TRIGGER ledger_lots
    AFTER INSERT ON ledger
    REFERENCING NEW TABLE AS new_entries
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_lots_apply();

COMMENT ON TRIGGER ledger_lots ON ledger IS
    'On Citus, as on plain PostgreSQL: every entry moves the lots of its account, per statement on each '
    'shard, right after ledger_chain moved the account, in seq order under the account lock.';

-- Auto-recharge and alerts: accounts_available_watch is deferred to commit, when it
-- runs on the accounts shard that the debit moved, before the worker prepares its part of the two-phase
-- commit. There Citus cannot plan a query on a distributed table (it refuses "a distributed query from a
-- query on a shard" and the commit fails), so this variant of the same rule names the account's
-- colocated shards, all on this node, as ledger_chain_advance does. The keys the shards carry
-- have the shard's suffix in their names, so conflicts are named by their columns
-- (recharge_windows_pkey is (account_id, period, window_start), recharge_blocks_pkey (account_id, episode,
-- reason), balance_alerts_pkey (account_id, threshold, episode)). recharge_status_sync and
-- recharge_status_compute take the tables they read and write by name, so the same functions (made present
-- on every node by db/citus.go) move the status here on the shards, and on the coordinator on the tables.
-- mirrors accounts_available_watch of 000031_baseline.up.sql sha256 abdef017e43c2b4e01ca471350cb3b75415139db9cdb10fd317d75b6649c4e27
CREATE OR REPLACE FUNCTION accounts_available_watch() RETURNS trigger
    LANGUAGE plpgsql AS
$$
DECLARE
    accounts_shard text := shard_name('accounts'::regclass, get_shard_id_for_distribution_column('accounts', NEW.id));
    attempts_shard text := shard_name('recharge_attempts'::regclass,
                                      get_shard_id_for_distribution_column('recharge_attempts', NEW.id));
    topups_shard   text := shard_name('topups'::regclass, get_shard_id_for_distribution_column('topups', NEW.id));
    alerts_shard   text := shard_name('balance_alerts'::regclass,
                                      get_shard_id_for_distribution_column('balance_alerts', NEW.id));
    windows_shard  text := shard_name('recharge_windows'::regclass,
                                      get_shard_id_for_distribution_column('recharge_windows', NEW.id));
    blocks_shard   text := shard_name('recharge_blocks'::regclass,
                                      get_shard_id_for_distribution_column('recharge_blocks', NEW.id));
    changes_shard  text := shard_name('recharge_status_changes'::regclass,
                                      get_shard_id_for_distribution_column('recharge_status_changes', NEW.id));
    a accounts;
    charge bigint;
    w_start timestamptz;
    admitted boolean;
    taken boolean;
    n bigint;
    moved text;
BEGIN
    -- The account as the transaction leaves it (see the plain function in the baseline).
    EXECUTE format('SELECT * FROM %s WHERE id = $1', accounts_shard) INTO a USING NEW.id;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s WHERE account_id = $1 AND episode = $2 AND retry = $3)', attempts_shard)
        INTO taken USING a.id, a.recharge_episode, a.recharge_retry;

    IF a.recharge_enabled AND a.balance - a.held < a.recharge_threshold AND NOT taken THEN
        charge := CASE a.recharge_mode
                      WHEN 'fixed' THEN a.recharge_amount
                      ELSE greatest(a.recharge_target - (a.balance - a.held),
                                    CASE lower(a.currency)
                                        WHEN 'gbp' THEN 30 WHEN 'hkd' THEN 400 WHEN 'dkk' THEN 250
                                        WHEN 'nok' THEN 300 WHEN 'sek' THEN 300 WHEN 'czk' THEN 1500
                                        WHEN 'huf' THEN 17500 WHEN 'mxn' THEN 1000 WHEN 'thb' THEN 1000
                                        WHEN 'aed' THEN 200 WHEN 'pln' THEN 200 WHEN 'ron' THEN 200
                                        WHEN 'myr' THEN 200 WHEN 'bgn' THEN 100
                                        ELSE 50 END)
                  END;
        EXECUTE format('UPDATE %s SET recharge_next_eligible_at = now() + $2 '
                       'WHERE id = $1 AND (recharge_next_eligible_at IS NULL OR recharge_next_eligible_at <= now())',
                       accounts_shard)
            USING a.id, a.recharge_cooldown;
        GET DIAGNOSTICS n = ROW_COUNT;
        admitted := n > 0;
        IF NOT admitted THEN
            EXECUTE format('INSERT INTO %s (account_id, episode, reason, next_eligible_at) VALUES ($1, $2, ''cooling_down'', $3) '
                           'ON CONFLICT (account_id, episode, reason) DO NOTHING', blocks_shard)
                USING a.id, a.recharge_episode, a.recharge_next_eligible_at;
            GET DIAGNOSTICS n = ROW_COUNT;
            moved := CASE WHEN n > 0 THEN 'blocked' END;
        ELSIF a.recharge_budget_period IS NOT NULL THEN
            w_start := date_trunc(a.recharge_budget_period, now(), 'UTC');
            EXECUTE format('INSERT INTO %s AS w '
                           '    (account_id, period, window_start, attempts, recharged_amount, max_attempts, max_amount) '
                           'SELECT $1, $2, $3, 1, $4, $5, $6 WHERE $4 <= coalesce($6, $4) '
                           'ON CONFLICT (account_id, period, window_start) DO UPDATE '
                           'SET attempts = w.attempts + 1, '
                           '    recharged_amount = w.recharged_amount + excluded.recharged_amount, '
                           '    max_attempts = excluded.max_attempts, max_amount = excluded.max_amount '
                           'WHERE w.attempts < coalesce(excluded.max_attempts, w.attempts + 1) '
                           '  AND w.recharged_amount + excluded.recharged_amount '
                           '      <= coalesce(excluded.max_amount, w.recharged_amount + excluded.recharged_amount)',
                           windows_shard)
                USING a.id, a.recharge_budget_period, w_start, charge, a.recharge_budget_count, a.recharge_budget_amount;
            GET DIAGNOSTICS n = ROW_COUNT;
            admitted := n > 0;
            IF NOT admitted THEN
                EXECUTE format('UPDATE %s SET recharge_next_eligible_at = $2 WHERE id = $1', accounts_shard)
                    USING a.id, a.recharge_next_eligible_at;
                EXECUTE format('INSERT INTO %s (account_id, episode, reason, next_eligible_at) '
                               'VALUES ($1, $2, ''budget_exhausted'', $3) '
                               'ON CONFLICT (account_id, episode, reason) DO NOTHING', blocks_shard)
                    USING a.id, a.recharge_episode, w_start + ('1 ' || a.recharge_budget_period)::interval;
                GET DIAGNOSTICS n = ROW_COUNT;
                moved := CASE WHEN n > 0 THEN 'blocked' END;
            END IF;
        END IF;
        IF admitted THEN
            EXECUTE format('WITH attempt AS ('
                           '    INSERT INTO %s (account_id, id, episode, retry, topup_id, amount)'
                           '    SELECT $1, s.id, $2, $5, ''rch_'' || s.id, $3'
                           '    FROM (SELECT nextval(''recharge_attempts_id_seq'') AS id) s'
                           '    RETURNING account_id, topup_id, amount'
                           ') '
                           'INSERT INTO %s (id, account_id, amount, currency) '
                           'SELECT topup_id, account_id, amount, $4 FROM attempt', attempts_shard, topups_shard)
                USING a.id, a.recharge_episode, charge, a.currency, a.recharge_retry;
            moved := 'attempt_requested';
        END IF;
    ELSIF a.recharge_threshold IS NOT NULL AND a.balance - a.held >= a.recharge_threshold THEN
        EXECUTE format('UPDATE %s SET recharge_episode = recharge_episode + 1, recharge_retry = 0 '
                       'WHERE id = $1 AND (EXISTS (SELECT 1 FROM %s r WHERE r.account_id = $1 AND r.episode = $2) '
                       '  OR EXISTS (SELECT 1 FROM %s b WHERE b.account_id = $1 AND b.episode = $2))',
                       accounts_shard, attempts_shard, blocks_shard)
            USING a.id, a.recharge_episode;
        GET DIAGNOSTICS n = ROW_COUNT;
        moved := CASE WHEN n > 0 THEN 'episode_ended' END;
    END IF;
    IF moved IS NOT NULL THEN
        PERFORM recharge_status_sync(a.id, moved, accounts_shard, attempts_shard, windows_shard, blocks_shard,
                                     changes_shard);
    END IF;

    IF a.low_balance_alert IS NULL THEN
        RETURN NULL;
    ELSIF a.balance - a.held < a.low_balance_alert THEN
        EXECUTE format('INSERT INTO %s (account_id, threshold, episode, low_available) VALUES ($1, $2, $3, $4) '
                       'ON CONFLICT (account_id, threshold, episode) DO NOTHING', alerts_shard)
            USING a.id, a.low_balance_alert, a.alert_episode, a.balance - a.held;
    ELSE
        EXECUTE format('WITH recovered AS ('
                       '    UPDATE %s SET recovered_at = now(), recovered_available = $4'
                       '    WHERE account_id = $1 AND threshold = $2 AND episode = $3 AND recovered_at IS NULL'
                       '    RETURNING account_id'
                       ') '
                       'UPDATE %s SET alert_episode = alert_episode + 1 WHERE id IN (SELECT account_id FROM recovered)',
                       alerts_shard, accounts_shard)
            USING a.id, a.low_balance_alert, a.alert_episode, a.balance - a.held;
    END IF;
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION accounts_available_watch() IS
    'At commit, for an account whose balance, held or retry the transaction moved (on Citus, on the account''s '
    'shard and its colocated shards): below its recharge threshold with the episode''s current try not made, '
    'claims the cooldown and the budget window by conditional statements and inserts the attempt with its '
    'pending order, or records why not; at or above it after an attempt or block, starts the next episode; '
    'and moves the recharge status those change (recharge_status_sync on the shards). Likewise records '
    'balance.low / balance.recovered once per alert episode.';

-- Unique keys that include the distribution column: changed once, while the tables are not distributed
-- yet (the ledger's primary key still has one column), and left as they are on every later run.
DO $keys$
BEGIN
    IF (SELECT array_length(conkey, 1) FROM pg_constraint WHERE conname = 'ledger_pkey' AND conrelid = 'ledger'::regclass) = 2 THEN
        RETURN;
    END IF;
    ALTER TABLE ledger DROP CONSTRAINT ledger_pkey, ADD CONSTRAINT ledger_pkey PRIMARY KEY (account_id, id);
    DROP INDEX ledger_dedupe_idx;
    CREATE UNIQUE INDEX ledger_account_dedupe_idx ON ledger (account_id, dedupe_key) WHERE dedupe_key IS NOT NULL;
    ALTER TABLE decisions DROP CONSTRAINT decisions_pkey, ADD CONSTRAINT decisions_pkey PRIMARY KEY (account_id, id);
    ALTER TABLE decisions DROP CONSTRAINT decisions_seq_key, ADD CONSTRAINT decisions_seq_key UNIQUE (account_id, seq);
    ALTER TABLE topups DROP CONSTRAINT topups_pkey, ADD CONSTRAINT topups_pkey PRIMARY KEY (account_id, id);
    ALTER TABLE topups DROP CONSTRAINT topups_session_id_key,
        ADD CONSTRAINT topups_session_id_key UNIQUE (account_id, session_id);
    ALTER TABLE topups DROP CONSTRAINT topups_payment_intent_key,
        ADD CONSTRAINT topups_payment_intent_key UNIQUE (account_id, payment_intent);
    ALTER TABLE stripe_events DROP CONSTRAINT stripe_events_seq_key, ADD CONSTRAINT stripe_events_seq_key UNIQUE (event_id, seq);
END;
$keys$;

COMMENT ON CONSTRAINT ledger_pkey ON ledger IS
    'One entry per id (on Citus with its account, the distribution column). Ids come from an identity; on '
    'Citus each node draws from its own range, so an account''s entries are ordered by seq, not id.';
COMMENT ON INDEX ledger_account_dedupe_idx IS
    'On Citus, ledger_dedupe_idx per account (the distribution column must lead a unique key): at most one '
    'entry per key within an account. Globally, dedupe_claims_pkey holds a key at most once.';
COMMENT ON CONSTRAINT decisions_pkey ON decisions IS
    'On Citus: a decision id is stored once per account; across accounts, intake claims decisions:{id} in '
    'dedupe_claims (claim_keys), so an id another account holds is not stored, as on plain PostgreSQL.';
COMMENT ON CONSTRAINT decisions_seq_key ON decisions IS
    'One arrival position per decision (seq comes from one identity; the key includes the distribution column).';
COMMENT ON CONSTRAINT topups_pkey ON topups IS
    'One order per id within its account; the id is named in the Checkout Session''s metadata (topup_id).';
COMMENT ON CONSTRAINT topups_session_id_key ON topups IS
    'One order per Checkout Session within its account; across accounts the session is claimed as sessions:{id} '
    'in dedupe_claims (TopupsSetSession, TopupsPay).';
COMMENT ON CONSTRAINT topups_payment_intent_key ON topups IS
    'One order per payment within its account: refunds and disputes find their account through it. Across '
    'accounts the payment is claimed as payments:{id} in dedupe_claims (TopupsPay, claim_unique).';
COMMENT ON CONSTRAINT stripe_events_seq_key ON stripe_events IS
    'seq comes from one identity, so it is unique; the key includes the distribution column, event_id.';

CREATE TABLE IF NOT EXISTS dedupe_claims (
    dedupe_key text        NOT NULL,
    account_id text        NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT dedupe_claims_pkey PRIMARY KEY (dedupe_key)
);

COMMENT ON TABLE dedupe_claims IS
    'On Citus: every dedupe key posted, with the account whose entry holds it, distributed by the key. A '
    'posting claims its key in its own transaction before inserting the entry; the claim and the entry '
    'commit or roll back together (two-phase commit across nodes).';
COMMENT ON COLUMN dedupe_claims.account_id IS
    'The account whose ledger holds the entry, so that a replay reads that entry from one shard.';
COMMENT ON CONSTRAINT dedupe_claims_pkey ON dedupe_claims IS
    'The seed''s guarantee on a sharded ledger: an effect with a dedupe key is posted at most once, globally. '
    'Claimed with INSERT ... ON CONFLICT (dedupe_key) DO NOTHING RETURNING: no row means already posted (or '
    'being posted by a transaction this one then waits for).';

-- A database that already has data keeps its keys claimed (once: while the table is still local): the
-- entries' dedupe keys, and the ids claimed with a prefix (claim_keys, claim_unique): decisions, the orders'
-- Checkout Sessions and payments.
DO $claims$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'dedupe_claims'::regclass) THEN
        INSERT INTO dedupe_claims (dedupe_key, account_id)
        SELECT dedupe_key, account_id FROM ledger WHERE dedupe_key IS NOT NULL
        UNION ALL
        SELECT 'decisions:' || id, account_id FROM decisions
        UNION ALL
        SELECT 'sessions:' || session_id, account_id FROM topups WHERE session_id IS NOT NULL
        UNION ALL
        SELECT 'payments:' || payment_intent, account_id FROM topups WHERE payment_intent IS NOT NULL
        ON CONFLICT (dedupe_key) DO NOTHING;
    END IF;
END;
$claims$;

-- The one road's Citus forms: ledger_append calls these under the same names.

-- mirrors accounts_lock of 000031_baseline.up.sql sha256 64975fb2d65d8b620b61116c36ade43336aac12eb3406b017feaea9aaec99f6b
CREATE OR REPLACE FUNCTION accounts_lock(p_ids text[], p_balance bigint DEFAULT NULL)
    RETURNS TABLE (id text, last_seq bigint, balance bigint, held bigint)
    LANGUAGE plpgsql AS
$$
DECLARE
    ids       text[];
    depths    integer[];
    account   text;
    shard_ids text[];
    r         record;
BEGIN
    ids := ARRAY(SELECT DISTINCT x FROM unnest(p_ids) AS x WHERE x IS NOT NULL ORDER BY x);
    IF cardinality(ids) = 0 THEN
        RETURN;
    END IF;
    IF cardinality(ids) = 1 THEN
        account := ids[1];
        RETURN QUERY
        SELECT a.id, a.last_seq, a.balance, a.held
        FROM accounts a
        WHERE a.id = account
          AND (p_balance IS NULL OR a.balance = p_balance)
        FOR NO KEY UPDATE;
        RETURN;
    END IF;
    -- Roots first: the depths, read without a lock (a depth never changes), order the locks.
    ids := '{}';
    FOR r IN SELECT a.id, a.depth FROM accounts a WHERE a.id = ANY(p_ids) LOOP
        ids := ids || r.id;
        depths := depths || r.depth;
    END LOOP;
    -- Then one router statement per shard at each depth, in shard order, locking its rows in id order
    -- (Citus locks rows only in single-shard statements): the accounts of a group commit spread over a
    -- few shards cost a few statements, not one each. Every locker of several accounts goes through
    -- here, so the order (depth, shard, id) is one order on the cluster.
    FOR shard_ids IN
        SELECT array_agg(u.id ORDER BY u.id)
        FROM unnest(ids, depths) AS u (id, depth)
        GROUP BY u.depth, get_shard_id_for_distribution_column('accounts', u.id)
        ORDER BY u.depth, get_shard_id_for_distribution_column('accounts', u.id)
    LOOP
        -- The ids as a literal: Citus prunes to the one shard when it plans the statement.
        RETURN QUERY EXECUTE format(
            'SELECT a.id, a.last_seq, a.balance, a.held FROM accounts a'
            ' WHERE a.id = ANY(%L::text[]) AND (%L::bigint IS NULL OR a.balance = %L::bigint)'
            ' ORDER BY a.id FOR NO KEY UPDATE', shard_ids, p_balance, p_balance);
    END LOOP;
END;
$$;

COMMENT ON FUNCTION accounts_lock(text[], bigint) IS
    'On Citus: locks the existing accounts among p_ids roots first, by depth, then shard, then id, with one '
    'router statement per shard at each depth, and returns them as locked; with p_balance, only an account '
    'whose balance is still that.';

-- mirrors ledger_keys_taken of 000031_baseline.up.sql sha256 8157a202ad6a4069bc235acfe822e35ec603dbf5e24be93413582563813bee6b
CREATE OR REPLACE FUNCTION ledger_keys_taken(p_keys text[])
    RETURNS SETOF text
    LANGUAGE plpgsql STABLE AS
$$
BEGIN
    RETURN QUERY SELECT c.dedupe_key FROM dedupe_claims c WHERE c.dedupe_key = ANY(p_keys);
END;
$$;

COMMENT ON FUNCTION ledger_keys_taken(text[]) IS
    'On Citus: the keys among p_keys claimed already (dedupe_claims, whatever account''s shard holds the entry).';

-- mirrors ledger_by_keys of 000033_ledger_by_keys.up.sql sha256 2217b05834ea27651f4230663acac392351e9cb81808e94ec5279bea984405e2
CREATE OR REPLACE FUNCTION ledger_by_keys(p_keys text[])
    RETURNS SETOF ledger
    LANGUAGE plpgsql AS
$$
DECLARE
    holder record;
BEGIN
    -- By the account that claimed each key: a router read of that account's shard.
    FOR holder IN
        SELECT c.account_id, array_agg(c.dedupe_key) AS keys
        FROM dedupe_claims c
        WHERE c.dedupe_key = ANY(p_keys)
        GROUP BY c.account_id
        ORDER BY c.account_id
    LOOP
        IF (SELECT count(*) FROM ledger l
            WHERE l.account_id = holder.account_id AND l.dedupe_key = ANY(holder.keys)) < cardinality(holder.keys) THEN
            -- A claim whose entry this statement's snapshot cannot see: its transaction committed on the
            -- claim's node and is still committing on the account's (or claimed a key of another kind,
            -- and this waits for nothing). That transaction locked the account row until it commits
            -- there: wait for it, and the next statement's snapshot sees the entry.
            PERFORM 1 FROM accounts a WHERE a.id = holder.account_id FOR SHARE;
        END IF;
        RETURN QUERY
        SELECT l.* FROM ledger l
        WHERE l.account_id = holder.account_id AND l.dedupe_key = ANY(holder.keys);
    END LOOP;
END;
$$;

COMMENT ON FUNCTION ledger_by_keys(text[]) IS
    'On Citus: the entries under the keys among p_keys, read by the account that claimed each key '
    '(dedupe_claims) on its shard; for a claim whose entry is not visible yet, after waiting (FOR SHARE on '
    'the account row) for the transaction that claimed it to commit on the account''s node.';

-- mirrors checkout_state of 000034_checkout_state.up.sql sha256 99cbff4f49645596fc88c059e66086626a9a741157ae7f8479481dcf7c692898
-- Each row on its one shard, not the plain form's join, which Citus runs over every shard of topups and
-- stripe_events: the event by its id (stripe_events' distribution column), the order through the account
-- that claimed its session (sessions:{id}, TopupsSetSession and TopupsPay), the account by its id. A
-- claim whose order is not visible yet (its transaction still committing on the account's node) reads as
-- no order: the happy path then records nothing (TopupsPay finds the session claimed) and the general
-- path applies the event. A recorded event reads nothing more (a redelivery). Whether events wait for the
-- payment is not read here: payment_intent is not stripe_events' distribution column, so the read would go
-- to every shard for every delivery, where a parked event is rare. The happy path's transaction reads it
-- after the payment's lock (StripeEventsParkedWaiting), as on plain PostgreSQL, and rolls back for the
-- general path when an event waits.
CREATE OR REPLACE FUNCTION checkout_state(p_event_id text, p_session_id text, p_metadata_account_id text, p_payment_intent text)
    RETURNS jsonb
    LANGUAGE plpgsql STABLE AS
$$
DECLARE
    v_key text;
    v_holder text;
    v_order jsonb;
    v_account_id text;
    v_account jsonb;
BEGIN
    -- Each statement names its distribution column with a value alone, which Citus routes without
    -- planning the statement as a distributed query.
    PERFORM 1 FROM stripe_events e WHERE e.event_id = p_event_id;
    IF FOUND THEN
        -- A redelivery: nothing else is read for it.
        RETURN jsonb_build_object('recorded', true, 'order', NULL, 'account', NULL, 'parked_waiting', false);
    END IF;
    v_key := 'sessions:' || p_session_id;
    SELECT c.account_id INTO v_holder FROM dedupe_claims c WHERE c.dedupe_key = v_key;
    IF v_holder IS NOT NULL THEN
        SELECT jsonb_build_object('id', t.id, 'account_id', t.account_id, 'amount', t.amount, 'currency', t.currency,
                                  'status', t.status, 'credits', t.credits),
               t.account_id
        INTO v_order, v_account_id
        FROM topups t
        WHERE t.account_id = v_holder AND t.session_id = p_session_id;
    END IF;
    v_account_id := coalesce(v_account_id, p_metadata_account_id);
    SELECT jsonb_build_object('id', a.id, 'currency', a.currency) INTO v_account
    FROM accounts a
    WHERE a.id = v_account_id;
    RETURN jsonb_build_object('recorded', false, 'order', v_order, 'account', v_account, 'parked_waiting', false);
END;
$$;

COMMENT ON FUNCTION checkout_state(text, text, text, text) IS
    'On Citus: what a Checkout Session''s completion reads before its transaction, each row on its one shard '
    '(the event by id, the order by the account that claimed the session, the account by id), nothing more '
    'for a recorded event; events waiting for the payment are left to the happy path''s transaction.';

-- mirrors topups_pay of 000037_topups_pay.up.sql sha256 c8a9224906a759927bd71021d673b1b875a3f2b3650e1cbb2820beb0384724c3
-- The plain form's one statement as statements of literal VALUES, each routed to the shards of its rows,
-- with the same effects in the same order: the pending orders made paid (one UPDATE), the sessions without
-- an order recorded paid on their accounts (the accounts read, the sessions claimed, one INSERT), the
-- payments claimed (claim_unique). Citus runs the plain form's CTEs as distributed subplans, each through
-- the coordinator and an intermediate result on the workers: measured on the local cluster, warm and
-- idle, 16 sessions without orders on 16 accounts took 31 to 60 ms that way and 10 to 14 ms this way.
CREATE OR REPLACE FUNCTION topups_pay(p_ids text[], p_account_ids text[], p_session_ids text[], p_payment_intents text[],
                                      p_paid_event_ids text[], p_amounts bigint[], p_currencies text[])
    RETURNS SETOF topups
    LANGUAGE plpgsql AS
$$
DECLARE
    paid          topups;
    paid_keys     text[] := '{}';
    paid_accounts text[] := '{}';
    paid_sessions text[] := '{}';
    known_ids     text[];
    known_currencies text[];
    candidates    integer[];
    currencies    text[];
    claimed       text[];
    to_record     text;
BEGIN
    IF coalesce(cardinality(p_ids), 0) = 0 THEN
        RETURN;
    END IF;
    -- The orders named by their session, or with none by their id, pending, of this amount and currency.
    -- = ANY on the distribution column: the UPDATE goes to the accounts' shards alone.
    FOR paid IN EXECUTE
        'UPDATE topups t SET status = ''paid'', payment_intent = s.payment_intent, paid_event_id = s.paid_event_id, paid_at = now()'
        || ' FROM (VALUES '
        || (SELECT string_agg(format('(%L, %L, %L, %L, %L, %L::bigint, %L)', p_ids[i], p_account_ids[i], nullif(p_session_ids[i], ''),
                                     nullif(p_payment_intents[i], ''), p_paid_event_ids[i], p_amounts[i], p_currencies[i]), ', ')
            FROM generate_subscripts(p_ids, 1) AS i)
        || ') AS s (id, account_id, session_id, payment_intent, paid_event_id, amount, currency)'
        || format(' WHERE t.account_id = s.account_id AND t.account_id = ANY(%L::text[])', p_account_ids)
        || ' AND (t.session_id = s.session_id OR (s.session_id IS NULL AND t.id = s.id))'
        || ' AND t.status = ''pending'' AND t.amount = s.amount AND lower(t.currency) = lower(s.currency)'
        || ' RETURNING t.*'
    LOOP
        RETURN NEXT paid;
        IF paid.payment_intent IS NOT NULL THEN
            paid_keys := paid_keys || ('payments:' || paid.payment_intent);
            paid_accounts := paid_accounts || paid.account_id;
        END IF;
        IF paid.session_id IS NOT NULL THEN
            paid_sessions := paid_sessions || paid.session_id;
        END IF;
    END LOOP;

    -- The sessions to record: on an account that exists and has the session's currency, claimed for it.
    -- A session whose order the UPDATE just paid is not among them: the plain form's insert of it finds
    -- that order (topups_session_id_key) and does nothing. When no other session is left (every order
    -- existed, as for sessions created through the API), nothing more is read or written.
    IF NOT EXISTS (SELECT 1 FROM generate_subscripts(p_ids, 1) AS i
                   WHERE nullif(p_session_ids[i], '') IS NOT NULL AND NOT p_session_ids[i] = ANY(paid_sessions)) THEN
        PERFORM claim_unique(paid_keys, paid_accounts, 'topups', 'topups_payment_intent_key');
        RETURN;
    END IF;
    SELECT coalesce(array_agg(a.id), '{}'), coalesce(array_agg(a.currency), '{}')
    INTO known_ids, known_currencies
    FROM accounts a
    WHERE a.id = ANY(p_account_ids);
    -- The positions of those sessions, with the currency as their account spells it.
    SELECT coalesce(array_agg(i ORDER BY i), '{}'), coalesce(array_agg(a.currency ORDER BY i), '{}')
    INTO candidates, currencies
    FROM generate_subscripts(p_ids, 1) AS i
    JOIN unnest(known_ids, known_currencies) AS a (id, currency)
        ON a.id = p_account_ids[i] AND lower(a.currency) = lower(p_currencies[i])
    WHERE nullif(p_session_ids[i], '') IS NOT NULL AND NOT p_session_ids[i] = ANY(paid_sessions);
    claimed := ARRAY(
        SELECT claim_keys(ARRAY(SELECT 'sessions:' || p_session_ids[c] FROM unnest(candidates) AS c),
                          ARRAY(SELECT p_account_ids[c] FROM unnest(candidates) AS c))
    );
    SELECT string_agg(format('(%L, %L, %L, %L::bigint, %L::bigint, %L, ''paid'', %L, %L, now())', p_ids[c.i],
                             p_account_ids[c.i], p_session_ids[c.i], p_amounts[c.i], p_amounts[c.i], c.currency,
                             nullif(p_payment_intents[c.i], ''), p_paid_event_ids[c.i]), ', ' ORDER BY c.i)
    INTO to_record
    FROM unnest(candidates, currencies) AS c (i, currency)
    WHERE 'sessions:' || p_session_ids[c.i] = ANY(claimed);
    IF to_record IS NOT NULL THEN
        -- The session's key alone: a payment that paid another order still fails the statement.
        FOR paid IN EXECUTE
            'INSERT INTO topups (id, account_id, session_id, amount, credits, currency, status, payment_intent, paid_event_id, paid_at)'
            || ' VALUES ' || to_record
            || ' ON CONFLICT ON CONSTRAINT topups_session_id_key DO NOTHING RETURNING *'
        LOOP
            RETURN NEXT paid;
            IF paid.payment_intent IS NOT NULL THEN
                paid_keys := paid_keys || ('payments:' || paid.payment_intent);
                paid_accounts := paid_accounts || paid.account_id;
            END IF;
        END LOOP;
    END IF;

    -- A payment another account's order holds fails the call, as its key does on plain PostgreSQL.
    PERFORM claim_unique(paid_keys, paid_accounts, 'topups', 'topups_payment_intent_key');
END;
$$;

COMMENT ON FUNCTION topups_pay(text[], text[], text[], text[], text[], bigint[], text[]) IS
    'On Citus: pays orders as the plain form does, with statements of literal VALUES routed to the shards of '
    'their rows: the pending orders made paid, the sessions without an order recorded paid (claimed as '
    'sessions:{id} first), the payments claimed as payments:{id} (claim_unique).';

-- mirrors stripe_events_insert_group of 000035_stripe_events_insert_group.up.sql sha256 7c89ce0de83b4790ceef8b56827b58529db3576d49ea7588332e5530735ea615
-- The events as the rows of one INSERT ... VALUES (literals, in id order), which Citus sends to each shard
-- of stripe_events as a statement of its own. The plain form's INSERT ... SELECT from the arrays runs
-- through the coordinator and an intermediate result per shard: on the local cluster at 32 concurrent
-- deliveries, 37 to 42 ms of a group of 32 in the coordinator's log; 24 events this way took 4 ms idle.
CREATE OR REPLACE FUNCTION stripe_events_insert_group(p_event_ids text[], p_types text[], p_api_versions text[], p_livemodes boolean[],
                                                      p_created timestamptz[], p_payloads jsonb[], p_outcomes text[], p_payment_intents text[])
    RETURNS SETOF text
    LANGUAGE plpgsql AS
$$
BEGIN
    IF coalesce(cardinality(p_event_ids), 0) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE
        'WITH inserted AS (INSERT INTO stripe_events AS e (event_id, type, api_version, livemode, created, payload, outcome, payment_intent) VALUES '
        || (SELECT string_agg(format('(%L, %L, %L, %L::boolean, %L::timestamptz, %L::jsonb, %L, %L)', p_event_ids[i], p_types[i],
                                     p_api_versions[i], p_livemodes[i], p_created[i], p_payloads[i], p_outcomes[i],
                                     p_payment_intents[i]), ', ' ORDER BY p_event_ids[i])
            FROM generate_subscripts(p_event_ids, 1) AS i)
        || ' ON CONFLICT (event_id) DO NOTHING RETURNING e.event_id) SELECT inserted.event_id FROM inserted';
END;
$$;

COMMENT ON FUNCTION stripe_events_insert_group(text[], text[], text[], boolean[], timestamptz[], jsonb[], text[], text[]) IS
    'On Citus: records a group of verified events at most once each (stripe_events_pkey) as one INSERT ... VALUES '
    'that Citus splits by shard, returning the ids it inserted.';

-- mirrors claim_keys of 000031_baseline.up.sql sha256 5e375a801163d30d964415005b633df7c6893be1d780437ef42f726444c77b1a
CREATE OR REPLACE FUNCTION claim_keys(p_keys text[], p_account_ids text[])
    RETURNS SETOF text
    LANGUAGE plpgsql AS
$$
DECLARE
    claimed bigint;
BEGIN
    IF coalesce(cardinality(p_keys), 0) = 0 THEN
        RETURN;
    END IF;
    -- Counted from RETURNING: Citus reports the rows an INSERT ... SELECT read as its ROW_COUNT, inserted or not.
    IF cardinality(p_keys) <= 1000 THEN
        -- The keys as the rows of one INSERT ... VALUES: Citus sends each shard its rows as a statement of
        -- its own. An INSERT ... SELECT from the arrays runs through the coordinator instead, writing
        -- intermediate results on the workers: measured on the local cluster, 23 ms for one key or for 32
        -- (a posting, a group), against 1 to 4 ms this way. Literals, not $1[i]: Citus evaluates the rows'
        -- parameters per shard, 30 ms for 128 keys. With literals, 512 keys took 15 ms against the
        -- SELECT's 30, 2,000 as long as the SELECT and 5,000 three times as long: beyond 1,000 keys (a
        -- billing chunk's) the SELECT stays. Sorted: concurrent claims take keys in one order.
        EXECUTE 'WITH fresh AS (INSERT INTO dedupe_claims AS c (dedupe_key, account_id) VALUES '
             || (SELECT string_agg(format('(%L, %L)', k.key, k.account_id), ', ' ORDER BY k.key)
                 FROM unnest(p_keys, p_account_ids) AS k (key, account_id))
             || ' ON CONFLICT (dedupe_key) DO NOTHING RETURNING c.dedupe_key) SELECT count(*) FROM fresh'
        INTO claimed;
    ELSE
        WITH fresh AS (
            INSERT INTO dedupe_claims AS c (dedupe_key, account_id)
            SELECT k.key, k.account_id FROM unnest(p_keys, p_account_ids) AS k (key, account_id)
            ON CONFLICT (dedupe_key) DO NOTHING
            RETURNING c.dedupe_key
        )
        SELECT count(*) INTO claimed FROM fresh;
    END IF;
    IF claimed = cardinality(p_keys) THEN
        RETURN QUERY SELECT unnest(p_keys);
        RETURN;
    END IF;
    -- Some were claimed before, or by a concurrent transaction this one waited for: those of the same
    -- account are the account's own (its per-account unique key decides, as on plain PostgreSQL), those of
    -- another account are taken.
    RETURN QUERY
    SELECT c.dedupe_key FROM dedupe_claims c
    WHERE c.dedupe_key = ANY(p_keys)
      AND c.account_id = p_account_ids[array_position(p_keys, c.dedupe_key)];
END;
$$;

COMMENT ON FUNCTION claim_keys(text[], text[]) IS
    'On Citus: claims p_keys for their accounts in dedupe_claims (dedupe_claims_pkey), in the writing '
    'transaction, and returns the keys now claimed by the account beside each; a key another account claimed '
    'already, or claims in a concurrent transaction this one waited for, is not returned, and nothing may be '
    'written under it. A key its own account claimed before is returned: that account''s own unique key (per '
    'account on Citus) answers the write exactly as the global key does on plain PostgreSQL.';

-- mirrors ledger_insert of 000036_ledger_insert.up.sql sha256 b6efadb8fdd399d8dcf7bc5f23bfde73f5e9c52041f13e7c10c971120dc4de49
-- Up to 1,000 rows (a posting, a group of them, a capture, a webhook's group of Checkout Sessions): the
-- rows of one INSERT ... VALUES (literals, in account and seq order), which Citus sends to each shard as
-- a statement of its own, the workers in parallel, and the entries' triggers run on each with its rows. The
-- plain form's INSERT ... SELECT from the arrays cannot: into several shards, it sends them their rows
-- with COPY, in the middle of which the triggers cannot run their statements, so it goes one shard at a
-- time, each through the coordinator and an intermediate result on the worker. Measured on the local
-- cluster, warm and idle: ledger_append of 32 credits on 32 accounts over 8 shards took 28 to 32 ms that
-- way and 17 to 22 ms this way. Beyond 1,000 rows (a billing chunk's), that SELECT, one shard at a time,
-- stays: as for claim_keys, literals cost more per row than they save.
CREATE OR REPLACE FUNCTION ledger_insert(p_k bigint[], p_account_ids text[], p_seqs bigint[], p_balances_after bigint[], p_dedupe_keys text[], p_kinds text[], p_amounts bigint[], p_descriptions text[], p_payment_intents text[], p_lot_ids bigint[], p_reverses_entry_ids bigint[], p_lot_categories text[], p_lot_priorities smallint[], p_lot_expires_at text[], p_lot_ttls double precision[], p_subjects text[], p_features text[], p_lot_cost_amounts bigint[], p_lot_cost_currencies text[], p_on_behalf_of text[])
    RETURNS TABLE(k bigint, id bigint, account_id text, kind text, amount bigint, description text, dedupe_key text, payment_intent text, seq bigint, balance_after bigint, created_at timestamptz, lot_id bigint, reverses_entry_id bigint, subject text, feature text, on_behalf_of text)
    LANGUAGE plpgsql AS
$$
DECLARE
    batch text[];
BEGIN
    IF coalesce(cardinality(p_k), 0) = 0 THEN
        RETURN;
    END IF;
    IF cardinality(p_k) <= 1000 THEN
        -- The row values as the plain form computes them, created_at taken per row as it is formatted.
        RETURN QUERY EXECUTE
            'WITH inserted AS (INSERT INTO ledger AS l (account_id, kind, amount, description, dedupe_key, payment_intent, seq, balance_after, created_at, lot_id, reverses_entry_id, lot_category, lot_priority, lot_expires_at, subject, feature, lot_cost_amount, lot_cost_currency, on_behalf_of) VALUES '
            || (SELECT string_agg(format('(%L, %L, %L::bigint, %L, %L, %L, %L::bigint, %L::bigint, %L::timestamptz, %L::bigint, '
                                         '%L::bigint, %L, %L::smallint, %L::timestamptz, %L, %L, %L::bigint, %L, %L)',
                                         r.account_id, p_kinds[r.k], p_amounts[r.k], coalesce(p_descriptions[r.k], ''),
                                         r.dedupe_key, nullif(p_payment_intents[r.k], ''), r.seq, r.balance_after, r.at,
                                         nullif(p_lot_ids[r.k], 0), p_reverses_entry_ids[r.k],
                                         CASE WHEN p_amounts[r.k] > 0 THEN nullif(p_lot_categories[r.k], '') END,
                                         CASE WHEN p_amounts[r.k] > 0 THEN p_lot_priorities[r.k] END,
                                         CASE WHEN p_amounts[r.k] > 0 THEN
                                             coalesce(nullif(p_lot_expires_at[r.k], '')::timestamptz,
                                                      r.at + make_interval(secs => nullif(p_lot_ttls[r.k], 0)))
                                         END,
                                         nullif(p_subjects[r.k], ''), nullif(p_features[r.k], ''),
                                         CASE WHEN p_amounts[r.k] > 0 AND nullif(p_lot_cost_currencies[r.k], '') IS NOT NULL
                                              THEN coalesce(p_lot_cost_amounts[r.k], 0) END,
                                         CASE WHEN p_amounts[r.k] > 0 THEN nullif(p_lot_cost_currencies[r.k], '') END,
                                         nullif(p_on_behalf_of[r.k], '')),
                                  ', ' ORDER BY r.account_id, r.seq)
                FROM (
                    SELECT u.*, clock_timestamp() AS at
                    FROM unnest(p_k, p_account_ids, p_seqs, p_balances_after, p_dedupe_keys)
                        AS u (k, account_id, seq, balance_after, dedupe_key)
                ) r)
            || ' ON CONFLICT DO NOTHING RETURNING l.id, l.account_id, l.kind, l.amount, l.description, l.dedupe_key,'
               ' l.payment_intent, l.seq, l.balance_after, l.created_at, l.lot_id, l.reverses_entry_id, l.subject,'
               ' l.feature, l.on_behalf_of)'
            || format(' SELECT r.k, i.id, i.account_id, i.kind, i.amount, i.description, i.dedupe_key, i.payment_intent,'
                      ' i.seq, i.balance_after, i.created_at, i.lot_id, i.reverses_entry_id, i.subject, i.feature,'
                      ' i.on_behalf_of FROM inserted i'
                      ' JOIN unnest(%L::bigint[], %L::text[], %L::bigint[]) AS r (k, account_id, seq)'
                      ' ON r.account_id = i.account_id AND r.seq = i.seq ORDER BY i.account_id, i.seq',
                      p_k, p_account_ids, p_seqs);
        RETURN;
    END IF;
    -- One shard's accounts at a time, in the order of their first account.
    FOR batch IN
        SELECT array_agg(DISTINCT a ORDER BY a)
        FROM unnest(p_account_ids) AS a
        GROUP BY get_shard_id_for_distribution_column('accounts', a)
        ORDER BY min(a)
    LOOP
        RETURN QUERY
        WITH planned AS (
            SELECT r.k, r.account_id, r.seq, r.balance_after, r.dedupe_key, clock_timestamp() AS at
            FROM unnest(p_k, p_account_ids, p_seqs, p_balances_after, p_dedupe_keys)
                AS r (k, account_id, seq, balance_after, dedupe_key)
            WHERE r.account_id = ANY(batch)
            ORDER BY r.account_id, r.seq
        ), inserted AS (
            INSERT INTO ledger AS l (account_id, kind, amount, description, dedupe_key, payment_intent, seq, balance_after,
                                     created_at, lot_id, reverses_entry_id, lot_category, lot_priority, lot_expires_at,
                                     subject, feature, lot_cost_amount, lot_cost_currency, on_behalf_of)
            SELECT r.account_id, p_kinds[r.k], p_amounts[r.k], coalesce(p_descriptions[r.k], ''), r.dedupe_key,
                   nullif(p_payment_intents[r.k], ''), r.seq, r.balance_after, r.at, nullif(p_lot_ids[r.k], 0),
                   p_reverses_entry_ids[r.k],
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
END;
$$;

COMMENT ON FUNCTION ledger_insert(bigint[], text[], bigint[], bigint[], text[], text[], bigint[], text[], text[], bigint[], bigint[], text[], smallint[], text[], double precision[], text[], text[], bigint[], text[], text[]) IS
    'On Citus: inserts ledger_append''s rows as the plain form does, up to 1,000 as one INSERT ... VALUES that Citus '
    'sends to each shard as a statement of its own, more with an INSERT ... SELECT per shard, one shard at a time.';

-- mirrors stripe_events_lock_parked of 000031_baseline.up.sql sha256 f4b61ddcbd6c56c06e363c65e7029cc5829b137106f02d3167d2afc4049a8756
CREATE OR REPLACE FUNCTION stripe_events_lock_parked(p_payment_intent text)
    RETURNS TABLE (event_id text, payload jsonb)
    LANGUAGE plpgsql AS
$$
DECLARE
    parked text;
BEGIN
    -- Found across shards without locks, then locked one by one on their own shards.
    FOR parked IN
        SELECT e.event_id FROM stripe_events e
        WHERE e.outcome = 'parked' AND e.parked_reason = 'unknown_payment' AND e.payment_intent = p_payment_intent
        ORDER BY e.seq
    LOOP
        RETURN QUERY
        SELECT e.event_id, e.payload FROM stripe_events e
        WHERE e.event_id = parked AND e.outcome = 'parked' AND e.parked_reason = 'unknown_payment'
        FOR UPDATE SKIP LOCKED;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION stripe_events_lock_parked(text) IS
    'On Citus: the events parked as unknown_payment for a payment, in arrival order, each locked on its own shard '
    '(SKIP LOCKED: one being replayed right now is passed over).';

-- The closed periods' totals refer to their period: both are reference tables, but create_reference_table
-- on revenue_periods would first turn every local table that refers to it into a Citus local table (a new
-- shell, without the comments of its table, constraints and triggers). The foreign key is dropped here,
-- before either is distributed, and added back once both are reference tables (db/citus.go).
DO $periods$
BEGIN
    IF to_regclass('revenue_period_balances') IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'revenue_period_balances'::regclass) THEN
        ALTER TABLE revenue_period_balances DROP CONSTRAINT IF EXISTS revenue_period_balances_period_fk;
    END IF;
END;
$periods$;

-- The tree of pools: trigger accounts_parent_tree runs on the shard that gets the row
-- and reads the parent and its ancestors, which live on whatever shard their ids hash to. A foreign key
-- to another shard is not possible, so that read is a distributed query from a query on a shard, which
-- Citus runs only when allowed: allowed for this function alone, whose reads are single rows of accounts
-- by id (a parent's currency, depth and parent never change once its members exist).
ALTER FUNCTION accounts_parent_tree() SET citus.allow_nested_distributed_execution = on;
