-- Back to the five first reasons. Fails while an event is parked with one of the three added by the
-- up migration: those events would have no valid reason; replay or delete them first.
ALTER TABLE stripe_events DROP CONSTRAINT stripe_events_parked_reason_check;
ALTER TABLE stripe_events ADD CONSTRAINT stripe_events_parked_reason_check CHECK (
    (outcome = 'parked') = (parked_reason IS NOT NULL)
    AND parked_reason IN ('unknown_payment', 'unknown_account', 'currency_mismatch',
                          'dedupe_conflict', 'refund_list_unavailable')
);

COMMENT ON CONSTRAINT stripe_events_parked_reason_check ON stripe_events IS
    'A parked event always says why, and only parked events have a reason.';
