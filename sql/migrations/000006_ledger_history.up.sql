-- History (SPEC §10): every entry carries the balance it left, in a per-account order of its own.
--
-- The chain rule: within one account, in seq order (1, 2, 3, ...), balance_after = previous
-- balance_after + amount (the first entry: amount), and the last entry's balance_after is
-- accounts.balance. seq and balance_after are taken from the account row, which every posting path
-- locks before it inserts the account's entries; created_at is clock_timestamp() under that lock, so it
-- grows with seq within an account.
--
-- The database holds the chain: the insert statements compute seq = last_seq + position and
-- balance_after = balance + running sum from the locked account row, and the statement-level trigger
-- ledger_chain_advance moves accounts.balance and accounts.last_seq by the inserted rows, refusing
-- (check_violation naming constraint ledger_chain) rows that do not continue the chain exactly. No path
-- can forget the cached balance or leave a hole.
--
-- Trigger kept. Measured in one run, before and after this migration, on the shared 2-core machine (load
-- average 14-18 from other suites, so single runs are noisy): billing 1,000,000 decisions through the
-- reconciler (go test -bench '^BenchmarkBilling$' ./reconcile) over 1,000 accounts went from 24,528 to
-- 17,464 decisions/s (0.71x, within the 0.7x bound); over one account from 26,491 to 8,121 in that run,
-- and from 21,687 to 33,165 when run again alone right after (1.5x): the machine's load, not the schema,
-- moved that one. Group commit (db/poster_bench_test.go, 64 callers on one account) stays far
-- above 10x one transaction per posting: 0.32-0.45 ms against 37.8 ms per posting (0.28-0.39 against
-- 14.2 before). In EXPLAIN ANALYZE of one 10,000-decision chunk the trigger takes 50-80 ms of 700-1,200
-- ms; what billing pays for history is mostly the chain itself (one more ledger_dedupe_idx probe per
-- decision, the running-sum window, two more indexes), which the queries would pay without the trigger
-- as well, while moving the balance in each query instead would save only the trigger's call.

ALTER TABLE accounts ADD COLUMN last_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE ledger ADD COLUMN seq bigint, ADD COLUMN balance_after bigint;

-- Backfill, set-based: per account in id order (the order entries were posted in before seq existed).
-- The append-only trigger refuses every UPDATE; it is off for this one statement only.
ALTER TABLE ledger DISABLE TRIGGER ledger_append_only;
UPDATE ledger l
SET seq = c.seq, balance_after = c.balance_after
FROM (
    SELECT id,
           row_number() OVER w AS seq,
           sum(amount) OVER w AS balance_after
    FROM ledger
    WINDOW w AS (PARTITION BY account_id ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
) c
WHERE l.id = c.id;
ALTER TABLE ledger ENABLE TRIGGER ledger_append_only;

UPDATE accounts a
SET last_seq = l.entries
FROM (SELECT account_id, count(*) AS entries FROM ledger GROUP BY account_id) l
WHERE a.id = l.account_id;

ALTER TABLE ledger ALTER COLUMN seq SET NOT NULL, ALTER COLUMN balance_after SET NOT NULL;
-- The time an entry is inserted, not its transaction's start: under the account lock, so it grows with seq.
ALTER TABLE ledger ALTER COLUMN created_at SET DEFAULT clock_timestamp();

ALTER TABLE ledger ADD CONSTRAINT ledger_account_seq_key UNIQUE (account_id, seq);

CREATE INDEX ledger_account_created_idx ON ledger (account_id, created_at, seq);

COMMENT ON COLUMN accounts.balance IS
    'Cached sum of this account''s ledger entries, equal to the balance_after of its last entry; moved only by '
    'the trigger ledger_chain_advance, in the statement that inserts the entries. `onceledger verify` checks it.';
COMMENT ON COLUMN accounts.last_seq IS
    'The seq of this account''s last entry (0: none). A posting locks the account row and numbers its entries '
    'last_seq + 1, + 2, ...; ledger_chain_advance moves it.';
COMMENT ON COLUMN ledger.seq IS
    'Position of the entry within its account: 1, 2, 3, ... without holes, taken from accounts.last_seq under '
    'the account''s row lock. The chain follows seq, not the global id (not ordered per account once sharded).';
COMMENT ON COLUMN ledger.balance_after IS
    'The account''s balance right after this entry: previous balance_after + amount, in seq order (the first '
    'entry: amount). Held by ledger_chain_advance and checked by verify.';
COMMENT ON CONSTRAINT ledger_account_seq_key ON ledger IS
    'One entry per position of an account: two postings that read the same last_seq cannot both insert. '
    'Also serves statements and balance lookups by (account_id, seq).';
COMMENT ON INDEX ledger_account_created_idx IS
    'Finds the last entry of an account at or before a time (balance at, statement bounds); created_at grows '
    'with seq within an account, as both are taken under the account''s row lock.';

CREATE FUNCTION ledger_chain_advance() RETURNS trigger
    LANGUAGE plpgsql AS
$$
DECLARE
    posted_accounts bigint;
    moved_accounts  bigint;
BEGIN
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
        -- Contiguous from last_seq + 1 (ledger_account_seq_key forbids repeats), linked within the
        -- statement, and closing at balance + total, which makes the first entry start at the balance.
        UPDATE accounts a
        SET balance = p.closing, last_seq = p.last_seq
        FROM per_account p
        WHERE a.id = p.account_id
          AND p.linked
          AND p.first_seq = a.last_seq + 1
          AND p.last_seq = a.last_seq + p.entries
          AND p.closing = a.balance + p.total
        RETURNING a.id
    )
    SELECT (SELECT count(*) FROM per_account), (SELECT count(*) FROM moved)
    INTO posted_accounts, moved_accounts;
    IF moved_accounts <> posted_accounts THEN
        RAISE EXCEPTION 'ledger entries do not continue their account''s chain'
            USING ERRCODE = 'check_violation',
                  CONSTRAINT = 'ledger_chain',
                  TABLE = TG_TABLE_NAME,
                  HINT = 'seq must run from accounts.last_seq + 1 without holes, and balance_after from '
                         'accounts.balance by each amount; lock the account row before inserting.';
    END IF;
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION ledger_chain_advance() IS
    'After each INSERT statement on the ledger: moves accounts.balance and last_seq by the inserted entries, '
    'or raises check_violation naming constraint ledger_chain on table ledger when they do not continue '
    'their account''s chain exactly.';

CREATE TRIGGER ledger_chain
    AFTER INSERT ON ledger
    REFERENCING NEW TABLE AS new_entries
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_chain_advance();

COMMENT ON TRIGGER ledger_chain ON ledger IS
    'The chain rule and the cached balance are held by the database: every INSERT statement''s entries must '
    'continue their account''s seq and balance_after from accounts.last_seq and accounts.balance, which this '
    'trigger then moves. No posting path can forget the balance or break the chain.';
