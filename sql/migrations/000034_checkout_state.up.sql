-- checkout_state is what a Checkout Session's completion reads before its transaction, in one call:
-- whether the event was recorded already (a redelivery, answered with no transaction at all, and for
-- which nothing else is read), the session's order, the account it credits (the order's, else the
-- session's metadata account_id) and whether events are parked waiting for the payment. It decides only
-- which path the event takes: the happy path's own statements (StripeEventsInsert,
-- StripeEventsLockPayment, TopupsPay, StripeEventsParkedWaiting, LedgerAppend) hold the money's
-- guarantees again, whatever changed since.
-- A function, so that its Citus form (sql/citus) reads each row on its one shard: the event by its id,
-- the order by the account that claimed the session, the account by its id. It answers one JSON object,
-- {"recorded", "order": {"id", "account_id", "amount", "currency", "status", "credits"} or null,
-- "account": {"id", "currency"} or null, "parked_waiting"}: the code generator reads no row types.
CREATE FUNCTION checkout_state(p_event_id text, p_session_id text, p_metadata_account_id text, p_payment_intent text)
    RETURNS jsonb
    -- PL/pgSQL, whose plan each session keeps: a SQL function that cannot be inlined (this one has a
    -- FROM) is planned again at every call, which halved the rate of redeliveries this read answers.
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM stripe_events e WHERE e.event_id = p_event_id) THEN
        -- A redelivery: nothing else is read for it.
        RETURN jsonb_build_object('recorded', true, 'order', NULL, 'account', NULL, 'parked_waiting', false);
    END IF;
    RETURN (
        SELECT jsonb_build_object(
                   'recorded', false,
                   'order', CASE WHEN t.id IS NOT NULL THEN jsonb_build_object(
                       'id', t.id, 'account_id', t.account_id, 'amount', t.amount, 'currency', t.currency,
                       'status', t.status, 'credits', t.credits) END,
                   'account', CASE WHEN a.id IS NOT NULL THEN jsonb_build_object('id', a.id, 'currency', a.currency) END,
                   'parked_waiting', EXISTS (
                       SELECT 1 FROM stripe_events p
                       WHERE p.outcome = 'parked'
                         AND p.parked_reason = 'unknown_payment'
                         AND p.payment_intent = p_payment_intent))
        FROM (SELECT) AS one
        LEFT JOIN topups t ON t.session_id = p_session_id
        LEFT JOIN accounts a ON a.id = coalesce(t.account_id, p_metadata_account_id));
END;
$$;

COMMENT ON FUNCTION checkout_state(text, text, text, text) IS 'What a Checkout Session''s completion reads before its transaction, as one JSON object: whether the event is recorded, the session''s order, the account it credits, whether events wait for the payment. Decides the path only; the happy path''s statements hold the guarantees. On Citus (sql/citus) each row is read on its one shard.';
