-- Back to ANALYZE's own estimate of entries per account. On a Citus cluster, on the coordinator's table
-- and then on every shard of the ledger: Citus refuses the change on a distributed table and gives it
-- to no shard (see the up).

SELECT set_config('citus.enable_ddl_propagation', 'off', true)
WHERE EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus');

ALTER TABLE ledger ALTER COLUMN account_id RESET (n_distinct);

DO $$
BEGIN
    -- dedupe_claims is there once the distribute step has run (db.Distributed).
    IF to_regclass('dedupe_claims') IS NOT NULL THEN
        PERFORM run_command_on_shards('ledger', 'ALTER TABLE %s ALTER COLUMN account_id RESET (n_distinct)');
    END IF;
END
$$;
