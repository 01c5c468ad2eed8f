-- Three more reasons to park a Stripe event instead of moving money:
--   amount_out_of_range  an amount above 10^15 minor units, or one that would carry a balance beyond a bigint;
--   livemode_mismatch    a test-mode event reaching a live deployment, or the reverse;
--   amount_mismatch      a session completed with another amount or currency than its API-created order.
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
