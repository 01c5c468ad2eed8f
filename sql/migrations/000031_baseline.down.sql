-- Undoes the baseline: the whole schema goes, so it refuses while any of its tables holds a row (drop the
-- database instead: a migration never empties a ledger, its accounts or its events). River's job tables
-- stay, as after any down. On a database the distribute step prepared for Citus, its own objects go too,
-- so that migrate up builds and distributes the schema again.
DO $$
DECLARE
    t    text;
    held boolean;
BEGIN
    FOR t IN
        SELECT c.relname FROM pg_class c
        WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')
          AND c.relname NOT LIKE 'river\_%' AND c.relname <> 'schema_migrations'
          AND NOT EXISTS (SELECT 1 FROM pg_depend d
                          WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')
        ORDER BY c.relname
    LOOP
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I)', t) INTO held;
        IF held THEN
            RAISE EXCEPTION 'migrate down past the baseline (31) drops every table, and % holds rows', t
                USING ERRCODE = 'restrict_violation',
                      HINT = 'Drop the database instead.';
        END IF;
    END LOOP;
END;
$$;

-- lots_apply_entry takes a ledger row: it goes before the ledger. The tables go together, keys and all.
DROP FUNCTION lots_apply_entry(ledger);
DROP TABLE
    accounts,
    audit_log,
    balance_alerts,
    console_sessions,
    credit_lots,
    decisions,
    hold_reservations,
    holds,
    ledger,
    lot_debts,
    lot_draws,
    lot_refills,
    recharge_attempts,
    recharge_blocks,
    recharge_status_changes,
    recharge_windows,
    revenue_period_balances,
    revenue_periods,
    revenue_recognitions,
    spend_limits,
    spend_windows,
    stripe_drift,
    stripe_drift_checkpoints,
    stripe_events,
    topups;
DROP TABLE IF EXISTS dedupe_claims;

DROP FUNCTION accounts_available_watch();
DROP FUNCTION accounts_lock(text[], bigint);
DROP FUNCTION accounts_parent_tree();
DROP FUNCTION audit_log_refuse_change();
DROP FUNCTION claim_keys(text[], text[]);
DROP FUNCTION claim_unique(text[], text[], text, text);
DROP FUNCTION hold_reservations_append_only();
DROP FUNCTION holds_resolution(timestamptz, timestamptz);
DROP FUNCTION ledger_append(text[], text[], bigint[], text[], text[], text[], boolean[], bigint[], text[], text[], smallint[], text[], double precision[], bigint, text[], text[], bigint[], text[], text[]);
DROP FUNCTION ledger_batches(text[]);
DROP FUNCTION ledger_chain_advance();
DROP FUNCTION ledger_keys_taken(text[]);
DROP FUNCTION ledger_lots_apply();
DROP FUNCTION ledger_refuse_change();
DROP FUNCTION lots_draw(text[], bigint[], bigint[], bigint[], bigint, boolean, text[], bigint[], timestamptz[]);
DROP FUNCTION lots_repay(text, bigint, timestamptz);
DROP FUNCTION recharge_status_compute(text, text, text, text, text);
DROP FUNCTION recharge_status_compute(text);
DROP FUNCTION recharge_status_sync(text, text, text, text, text, text, text);
DROP FUNCTION recharge_status_sync(text, text);
DROP FUNCTION revenue_periods_refuse_change();
DROP FUNCTION revenue_recognitions_refuse_change();
DROP FUNCTION stripe_events_lock_parked(text);
DROP FUNCTION topups_credits_default();
DROP FUNCTION IF EXISTS shard_of(regclass, text);
