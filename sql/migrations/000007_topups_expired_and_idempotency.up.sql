-- The order is the contract: a Checkout Session that expires unpaid expires its order, and a client that
-- retries POST /v1/accounts/{id}/topups with the same Idempotency-Key gets the same order (and so the
-- same Checkout Session) instead of a second one.

ALTER TABLE topups DROP CONSTRAINT topups_status_check;
ALTER TABLE topups ADD CONSTRAINT topups_status_check CHECK (status IN ('pending', 'paid', 'expired'));
COMMENT ON CONSTRAINT topups_status_check ON topups IS
    'An order is pending, paid or expired; nothing else. pending -> paid and pending -> expired are '
    'conditional UPDATEs (WHERE status = ''pending''), so an order ends one way, once.';
COMMENT ON COLUMN topups.status IS
    'pending until the webhook''s conditional UPDATE ... WHERE status = ''pending'' makes it paid (at most once; '
    'only the transaction that made that transition posts the credit) or expired (checkout.session.expired). '
    'A completion arriving for an expired order credits nothing and is parked order_expired.';

ALTER TABLE topups ADD COLUMN idempotency_key text;
ALTER TABLE topups ADD COLUMN request_fingerprint text;
-- Includes account_id: every unique key of a table distributed by account must (SPEC §15).
ALTER TABLE topups ADD CONSTRAINT topups_idempotency_key UNIQUE (account_id, idempotency_key);
ALTER TABLE topups ADD CONSTRAINT topups_idempotency_consistent_check CHECK (
    (idempotency_key IS NULL) = (request_fingerprint IS NULL)
    AND length(idempotency_key) BETWEEN 1 AND 255
);
COMMENT ON COLUMN topups.idempotency_key IS
    'The caller''s Idempotency-Key of the API request that created the order; NULL when none was sent or '
    'the webhook recorded the order.';
COMMENT ON COLUMN topups.request_fingerprint IS
    'A digest of the request body sent with idempotency_key: the same key with another body is a conflict.';
COMMENT ON CONSTRAINT topups_idempotency_key ON topups IS
    'One order per account and Idempotency-Key: a retried request, even concurrent, finds the first order '
    'instead of creating a second Checkout Session.';
COMMENT ON CONSTRAINT topups_idempotency_consistent_check ON topups IS
    'An idempotency key always comes with the fingerprint of its request, and is 1-255 characters.';

-- order_expired: a session completed for an order that had already expired (Stripe does not complete
-- an expired session; a signed event saying so is investigated, never credited).
ALTER TABLE stripe_events DROP CONSTRAINT stripe_events_parked_reason_check;
ALTER TABLE stripe_events ADD CONSTRAINT stripe_events_parked_reason_check CHECK (
    (outcome = 'parked') = (parked_reason IS NOT NULL)
    AND parked_reason IN ('unknown_payment', 'unknown_account', 'currency_mismatch',
                          'dedupe_conflict', 'refund_list_unavailable',
                          'amount_out_of_range', 'livemode_mismatch', 'amount_mismatch', 'order_expired')
);
COMMENT ON CONSTRAINT stripe_events_parked_reason_check ON stripe_events IS
    'A parked event always says why, and only parked events have a reason: unknown_payment, unknown_account, '
    'currency_mismatch, dedupe_conflict, refund_list_unavailable, amount_out_of_range (above 10^15 or beyond '
    'a bigint balance), livemode_mismatch (test event on a live deployment or the reverse), amount_mismatch '
    '(paid amount or currency differs from the order), order_expired (a completion for an expired order).';
