-- ledger_by_keys reads the entries posted under dedupe keys: the answer to a replay, or the entry a key
-- reused with other data conflicts with. Every such read goes through it, so that on Citus the read can
-- wait for the writer it lost a race to. On plain PostgreSQL a posting that lost the race for a key
-- waited on ledger_dedupe_idx until the winner committed, and the winner's entry is there to read. On
-- Citus (sql/citus) a key is claimed in dedupe_claims on one node and its entry written on the account's
-- node, and a two-phase commit reaches the nodes one after the other: the loser can see the claim before
-- the entry. Its Citus form reads each key by the account that claimed it (one shard, not every shard),
-- and waits for a claim whose entry it cannot see yet.
CREATE FUNCTION ledger_by_keys(p_keys text[]) RETURNS SETOF ledger
    LANGUAGE sql STABLE
    AS $$
SELECT l.* FROM ledger l WHERE l.dedupe_key = ANY(p_keys);
$$;

COMMENT ON FUNCTION ledger_by_keys(p_keys text[]) IS 'The entries posted under the keys among p_keys (ledger_dedupe_idx): an exact replay''s answer, or the entry a key reused with other data conflicts with. On Citus (sql/citus) read by the account that claimed each key, after waiting for a claim whose writer is still committing.';
