-- Scale-out on Citus (SPEC §15): what `onceledger migrate up` changes, once, on a database with the citus
-- extension, after the migrations and before it distributes the tables (db/citus.go: accounts by id, every
-- table of an account's data by account_id colocated with accounts, stripe_events by event_id,
-- dedupe_claims by dedupe_key). Plain PostgreSQL never runs this file: there ledger_dedupe_idx and
-- ledger_chain stay exactly as the migrations made them.
--
-- Citus requires every unique key of a distributed table to include its distribution column, so the
-- global keys become per account (per event for stripe_events). One of them carries the seed's guarantee,
-- ledger_dedupe_idx: an effect is posted at most once GLOBALLY. Two designs keep it:
--   (a) the ledger distributed by dedupe_key, so that the seed's index holds verbatim; or
--   (b) the ledger distributed by account_id, colocated with accounts, and a table dedupe_claims
--       distributed by dedupe_key, claimed with INSERT ... ON CONFLICT (dedupe_key) DO NOTHING RETURNING in
--       the posting's transaction (a multi-shard transaction, committed with two-phase commit).
-- We chose (b). Both were measured on a coordinator and two workers on one machine before this file was
-- written: billing ran about 1.5x faster with (b) than with (a). And (a) would scatter an account's entries over every shard, so that the chain
-- (seq, balance_after, moved with accounts.balance under the account's row lock) could no longer be held
-- by a trigger on the shard that holds the account: every posting would be a cross-node transaction
-- anyway, and the chain check a cross-shard query.
--
-- The chain: ledger_chain (migration 000006) is a statement-level trigger reading its transition table.
-- Citus runs a distributed table's triggers on its shards, where a transition table cannot be read from
-- the trigger's SQL ("executor could not find named tuplestore"). Here it becomes a row-level trigger of
-- the same name and the same rule, run on each shard: each entry must continue its account's chain
-- exactly (seq = last_seq + 1, balance_after = balance + amount), and it moves the account row, which is
-- on the same node (colocated), in the same local transaction.

-- The append-only refusal names the logical table, not the shard the trigger runs on, and says so in its
-- detail too (the one field Citus relays from a shard), so that the application recognises it
-- (db.MapError) as on plain PostgreSQL.
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

DROP TRIGGER ledger_chain ON ledger;
DROP FUNCTION ledger_chain_advance();

CREATE FUNCTION ledger_chain_advance_entry() RETURNS trigger
    LANGUAGE plpgsql AS
$$
DECLARE
    -- The shard of accounts colocated with this ledger shard: the account's row is on this node.
    accounts_shard text := shard_name('accounts'::regclass,
                                      get_shard_id_for_distribution_column('accounts', NEW.account_id));
    moved int;
BEGIN
    EXECUTE format('UPDATE %s SET balance = $1, last_seq = $2 '
                   'WHERE id = $3 AND last_seq = $2 - 1 AND balance::numeric = $1::numeric - $4', accounts_shard)
        USING NEW.balance_after, NEW.seq, NEW.account_id, NEW.amount;
    GET DIAGNOSTICS moved = ROW_COUNT;
    IF moved <> 1 THEN
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

COMMENT ON FUNCTION ledger_chain_advance_entry() IS
    'On Citus, after each inserted ledger entry, on its shard: moves the colocated accounts row to the entry''s '
    'seq and balance_after, or raises check_violation naming constraint ledger_chain on table ledger when the '
    'entry does not continue its account''s chain exactly (ledger_chain_advance, one entry at a time).';

CREATE TRIGGER ledger_chain
    AFTER INSERT ON ledger
    FOR EACH ROW EXECUTE FUNCTION ledger_chain_advance_entry();

COMMENT ON TRIGGER ledger_chain ON ledger IS
    'On Citus: the chain rule and the cached balance are held by the database on each shard: every entry must '
    'continue its account''s seq and balance_after from accounts.last_seq and accounts.balance, which this '
    'trigger then moves. No posting path can forget the balance or break the chain.';

-- Unique keys that include the distribution column.
ALTER TABLE ledger DROP CONSTRAINT ledger_pkey, ADD CONSTRAINT ledger_pkey PRIMARY KEY (account_id, id);
COMMENT ON CONSTRAINT ledger_pkey ON ledger IS
    'One entry per id (on Citus with its account, the distribution column). Ids come from an identity; on '
    'Citus each node draws from its own range, so an account''s entries are ordered by seq, not id.';

DROP INDEX ledger_dedupe_idx;
CREATE UNIQUE INDEX ledger_account_dedupe_idx ON ledger (account_id, dedupe_key) WHERE dedupe_key IS NOT NULL;
COMMENT ON INDEX ledger_account_dedupe_idx IS
    'On Citus, ledger_dedupe_idx per account (the distribution column must lead a unique key): at most one '
    'entry per key within an account. Globally, dedupe_claims_pkey holds a key at most once.';

ALTER TABLE decisions DROP CONSTRAINT decisions_pkey, ADD CONSTRAINT decisions_pkey PRIMARY KEY (account_id, id);
COMMENT ON CONSTRAINT decisions_pkey ON decisions IS
    'On Citus: a decision id is stored once per account. Billing claims decision:{id} globally in '
    'dedupe_claims, so an id reused with another account is never billed twice.';
ALTER TABLE decisions DROP CONSTRAINT decisions_seq_key, ADD CONSTRAINT decisions_seq_key UNIQUE (account_id, seq);
COMMENT ON CONSTRAINT decisions_seq_key ON decisions IS
    'One arrival position per decision (seq comes from one identity; the key includes the distribution column).';

ALTER TABLE topups DROP CONSTRAINT topups_pkey, ADD CONSTRAINT topups_pkey PRIMARY KEY (account_id, id);
COMMENT ON CONSTRAINT topups_pkey ON topups IS
    'One order per id within its account; the id is named in the Checkout Session''s metadata (topup_id).';
ALTER TABLE topups DROP CONSTRAINT topups_session_id_key, ADD CONSTRAINT topups_session_id_key UNIQUE (account_id, session_id);
COMMENT ON CONSTRAINT topups_session_id_key ON topups IS 'One order per Checkout Session within its account.';
ALTER TABLE topups DROP CONSTRAINT topups_payment_intent_key,
    ADD CONSTRAINT topups_payment_intent_key UNIQUE (account_id, payment_intent);
COMMENT ON CONSTRAINT topups_payment_intent_key ON topups IS
    'One order per payment within its account: refunds and disputes find their account through it.';

ALTER TABLE stripe_events DROP CONSTRAINT stripe_events_seq_key, ADD CONSTRAINT stripe_events_seq_key UNIQUE (event_id, seq);
COMMENT ON CONSTRAINT stripe_events_seq_key ON stripe_events IS
    'seq comes from one identity, so it is unique; the key includes the distribution column, event_id.';

CREATE TABLE dedupe_claims (
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

-- A database that already has entries keeps their keys claimed.
INSERT INTO dedupe_claims (dedupe_key, account_id)
SELECT dedupe_key, account_id FROM ledger WHERE dedupe_key IS NOT NULL;
