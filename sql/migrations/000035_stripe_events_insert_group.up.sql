-- stripe_events_insert_group records a group of verified events in one call, in the transaction that
-- applies them (the webhook's group commit of first deliveries): the arrays are read in lockstep, one
-- element per event, none parked. As a single event's insert, stripe_events_pkey makes each at most
-- once: it returns the ids it inserted, and an event recorded already, or meanwhile by a concurrent
-- delivery (waited for), is simply not among them. In id order: two groups (of two processes) holding
-- the same events lock them in the same order.
-- A function, so that its Citus form (sql/citus) writes the rows as literal VALUES, which Citus sends
-- to each shard as a statement of its own, instead of an INSERT ... SELECT through the coordinator.
CREATE FUNCTION stripe_events_insert_group(p_event_ids text[], p_types text[], p_api_versions text[], p_livemodes boolean[],
                                           p_created timestamptz[], p_payloads jsonb[], p_outcomes text[], p_payment_intents text[])
    RETURNS SETOF text
    -- PL/pgSQL, whose plan each session keeps (a SQL function that writes is planned at every call).
    LANGUAGE plpgsql
    AS $$
BEGIN
    RETURN QUERY
    WITH inserted AS (
        INSERT INTO stripe_events AS e (event_id, type, api_version, livemode, created, payload, outcome, payment_intent)
        SELECT p_event_ids[i], p_types[i], p_api_versions[i], p_livemodes[i], p_created[i], p_payloads[i], p_outcomes[i],
               p_payment_intents[i]
        FROM generate_subscripts(p_event_ids, 1) AS i
        ORDER BY p_event_ids[i]
        ON CONFLICT (event_id) DO NOTHING
        RETURNING e.event_id
    )
    SELECT inserted.event_id FROM inserted;
END;
$$;

COMMENT ON FUNCTION stripe_events_insert_group(text[], text[], text[], boolean[], timestamptz[], jsonb[], text[], text[]) IS
    'Records a group of verified events (arrays in lockstep, in id order) at most once each (stripe_events_pkey), '
    'returning the ids it inserted: an event recorded already, or meanwhile by a transaction this one waited for, '
    'is not returned.';
