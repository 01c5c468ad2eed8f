-- name: StripeEventsParkedUnreviewed :many
-- Parked events received before cutoff that no operator has looked at (verify). Parking keeps an event
-- safe, not finished: one left alone this long needs a person.
SELECT event_id, type, parked_reason::text AS parked_reason, received_at
FROM stripe_events
WHERE outcome = 'parked'
  AND reviewed_at IS NULL
  AND received_at < @cutoff
ORDER BY seq;
