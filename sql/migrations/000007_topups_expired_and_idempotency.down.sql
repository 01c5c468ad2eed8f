-- Back to 000005's parking reasons and to pending/paid orders without idempotency keys. Fails while an
-- event is parked order_expired or an order is expired: those rows would break the restored checks;
-- replay, mark or delete them first. The idempotency keys are dropped with their column.
ALTER TABLE stripe_events DROP CONSTRAINT stripe_events_parked_reason_check;
ALTER TABLE stripe_events ADD CONSTRAINT stripe_events_parked_reason_check CHECK (
    (outcome = 'parked') = (parked_reason IS NOT NULL)
    AND parked_reason IN ('unknown_payment', 'unknown_account', 'currency_mismatch',
                          'dedupe_conflict', 'refund_list_unavailable',
                          'amount_out_of_range', 'livemode_mismatch', 'amount_mismatch')
);
COMMENT ON CONSTRAINT stripe_events_parked_reason_check ON stripe_events IS
    'A parked event always says why, and only parked events have a reason: unknown_payment, unknown_account, '
    'currency_mismatch, dedupe_conflict, refund_list_unavailable, amount_out_of_range (above 10^15 or beyond '
    'a bigint balance), livemode_mismatch (test event on a live deployment or the reverse), amount_mismatch '
    '(paid amount or currency differs from the order).';

ALTER TABLE topups DROP CONSTRAINT topups_idempotency_consistent_check;
ALTER TABLE topups DROP CONSTRAINT topups_idempotency_key;
ALTER TABLE topups DROP COLUMN request_fingerprint;
ALTER TABLE topups DROP COLUMN idempotency_key;

ALTER TABLE topups DROP CONSTRAINT topups_status_check;
ALTER TABLE topups ADD CONSTRAINT topups_status_check CHECK (status IN ('pending', 'paid'));
COMMENT ON CONSTRAINT topups_status_check ON topups IS
    'An order is pending or paid; nothing else.';
COMMENT ON COLUMN topups.status IS
    'pending until the webhook''s conditional UPDATE ... WHERE status = ''pending'' makes it paid, at most once; '
    'only the transaction that made that transition posts the credit.';
