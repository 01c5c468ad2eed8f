COMMENT ON INDEX ledger_credits_created_idx IS NULL;
DROP TABLE stripe_drift_checkpoints;
DROP TABLE stripe_drift;
