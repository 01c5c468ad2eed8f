-- The planner is told that an account's entries are never unique to it: two an account at the least.
--
-- ANALYZE calls a column unique (n_distinct = -1, as many values as rows) when no value repeats in its
-- sample. A young ledger, every account with its first top-up and nothing more, reads that way, and
-- the planner then expects one entry per account however far the ledger grows until the next
-- ANALYZE. The statements that find an entry by its key name its account too (so that Citus runs them
-- on the account's shard): billing's probe of each decision (DecisionsUnbilledByAccount,
-- account_id = … AND dedupe_key = 'decision:' || …), a hold's capture, a spend window's decisions.
-- Expecting one entry per account, the planner costs such a probe the same through an index of the
-- account as through ledger_dedupe_idx, and takes the account's: a scan of every entry of the account
-- for each decision, which the billing pass itself makes longer (a first pass over accounts of one
-- entry each ran at 0.29x of the same pass without the lots trigger, one over five entries each at
-- 0.78x, docs/performance.md). At two entries an account or more, the unique key is the cheaper
-- probe, whatever ANALYZE finds. A ledger in use is never unique per account (every billed decision
-- is one more entry of its account); in one that has grown, the estimate stays below what ANALYZE
-- would find, and weighs the same indexes against each other: an account's, which every statement
-- naming one account reads, and a key's, which names one entry.

-- On a Citus cluster, Citus does not hand a column's options on to the shards (it refuses the statement
-- once the ledger is distributed): the coordinator's table takes the option alone, and the distribute
-- step of every migrate up gives its shards the options of their table (db/citus.go).
SELECT set_config('citus.enable_ddl_propagation', 'off', true)
WHERE EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus');

ALTER TABLE ledger ALTER COLUMN account_id SET (n_distinct = -0.5);
