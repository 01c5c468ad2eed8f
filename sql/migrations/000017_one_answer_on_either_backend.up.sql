-- Two statements that answered differently on Citus, given one form for both backends.

-- claim_unique holds a key the service promises unique across accounts whose reuse is an error, not a
-- silent no-op (a payment paying a second order): it claims the keys through claim_keys and, when one is
-- taken, fails as the table's own unique key fails on plain PostgreSQL, with the same SQLSTATE, table and
-- constraint, so that the application reads one answer on either backend. On plain PostgreSQL claim_keys
-- returns every key and the table's key does the refusing; on Citus (sql/citus) the keys are claimed in
-- dedupe_claims, across shards.
CREATE FUNCTION claim_unique(p_keys text[], p_account_ids text[], p_table text, p_constraint text)
    RETURNS integer
    LANGUAGE plpgsql AS
$$
DECLARE
    claimed integer;
BEGIN
    SELECT count(*) INTO claimed FROM claim_keys(p_keys, p_account_ids);
    IF claimed < coalesce(cardinality(p_keys), 0) THEN
        RAISE EXCEPTION 'duplicate key value violates unique constraint "%"', p_constraint
            USING ERRCODE = 'unique_violation', TABLE = p_table, CONSTRAINT = p_constraint;
    END IF;
    RETURN claimed;
END;
$$;

COMMENT ON FUNCTION claim_unique(text[], text[], text, text) IS
    'Claims p_keys (claim_keys) in the writing transaction, and raises unique_violation naming p_table and '
    'p_constraint when one is taken already: a unique key across accounts that Citus cannot hold as an index.';

-- holds_resolution is the state a hold leaves "held" for when it is voided at p_at: expired once its time is
-- up. A function of its own, in PL/pgSQL so that it is never inlined: Citus evaluates now() once, on the
-- coordinator, only where it is not inside a CASE, and refuses an UPDATE whose CASE calls it.
CREATE FUNCTION holds_resolution(p_expires_at timestamptz, p_at timestamptz)
    RETURNS text
    LANGUAGE plpgsql IMMUTABLE AS
$$
BEGIN
    RETURN CASE WHEN p_expires_at > p_at THEN 'voided' ELSE 'expired' END;
END;
$$;

COMMENT ON FUNCTION holds_resolution(timestamptz, timestamptz) IS
    'The state a held hold that expires at p_expires_at moves to when voided at p_at: voided, or expired when '
    'its time is up (what the expiry pass would do).';
