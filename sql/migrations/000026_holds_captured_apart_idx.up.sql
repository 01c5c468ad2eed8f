-- Billing charges a decision that names a hold captured through the API only for its cost beyond
-- the captured amount (SPEC §21; LedgerAppendForDecisions in sql/queries/ledger.sql). Looking that
-- hold up through holds_pkey costs an index descent and a heap fetch for every decision that names a
-- hold, almost all of which billing captures itself: most of a chunk's time when every decision has a
-- hold. This index holds only the holds captured apart from a decision (status 'captured', no
-- decision_id), so the lookup is a probe of a small index, or a single scan of it.
--
-- CONCURRENTLY, alone in its file (it cannot run in a transaction): building it never blocks
-- authorisations. A build that fails leaves an invalid index behind; drop it (DROP INDEX CONCURRENTLY
-- holds_captured_apart_idx) before migrating again. Its COMMENT ON is in the next migration.
CREATE INDEX CONCURRENTLY holds_captured_apart_idx ON holds (account_id, id)
    WHERE status = 'captured' AND decision_id IS NULL;
