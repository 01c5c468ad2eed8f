-- The Stripe drift pass (SPEC §20, sql/queries/stripe_drift.sql) reads every money-backed credit the
-- ledger posted in a window (a day): topups, refund restores and won disputes. Without this index that
-- is a scan of the whole ledger per window; with it, a range of the few credit rows. Partial, so that
-- usage, reversals and the rest (most of the ledger) add nothing to it.
--
-- CONCURRENTLY, alone in its file (it cannot run in a transaction): building it never blocks posting.
-- A build that fails leaves an invalid index behind; drop it (DROP INDEX CONCURRENTLY
-- ledger_credits_created_idx) before migrating again. Its COMMENT ON is in the next migration, which
-- adds the pass that reads through it.
CREATE INDEX CONCURRENTLY ledger_credits_created_idx ON ledger (created_at)
    WHERE kind IN ('topup', 'refund_restore', 'dispute_won');
