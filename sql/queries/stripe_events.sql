-- name: StripeEventsInsert :one
-- Records a verified event, in the transaction that applies it. Returns no row when the event id was
-- already recorded (stripe_events_pkey): the event was processed, and nothing else must be done. A
-- concurrent delivery of the same event waits here for the first transaction, then gets no row.
INSERT INTO stripe_events (event_id, type, api_version, livemode, created, payload, outcome, parked_reason, payment_intent)
VALUES (@event_id, @type, @api_version, @livemode, @created, @payload, @outcome, sqlc.narg(parked_reason), sqlc.narg(payment_intent))
ON CONFLICT (event_id) DO NOTHING
RETURNING seq;

-- name: StripeEventsInsertGroup :many
-- Records a group of verified events in one call (stripe_events_insert_group), in the transaction that
-- applies them (the webhook's group commit of first deliveries, CheckoutGrouper, whose transaction waits
-- at most 25 ms for any lock, else its members take their own transactions); the arrays are read in
-- lockstep, one element per event, none parked. As StripeEventsInsert, stripe_events_pkey makes each at
-- most once: returns the ids inserted, and an event recorded already, or meanwhile by a concurrent
-- delivery (waited for), is simply not among them.
SELECT stripe_events_insert_group(@event_ids::text[], @types::text[], @api_versions::text[], @livemodes::boolean[],
                                  @created::timestamptz[], @payloads::jsonb[], @outcomes::text[], @payment_intents::text[])::text AS event_id;

-- name: StripeEventsSetOutcome :execrows
-- Records the outcome of re-applying a stored event (replay, or un-parking when its payment arrives).
UPDATE stripe_events
SET outcome = @outcome, parked_reason = sqlc.narg(parked_reason), payment_intent = coalesce(sqlc.narg(payment_intent), payment_intent),
    outcome_at = now()
WHERE event_id = @event_id;

-- name: StripeEventsGet :one
-- Returns no row when the event was never received.
SELECT event_id, seq, type, api_version, livemode, created, payload, received_at, outcome, parked_reason, payment_intent, outcome_at, reviewed_at
FROM stripe_events
WHERE event_id = @event_id;

-- name: StripeEventsParkedForPayment :many
-- Events parked because their payment was unknown, to re-apply once that payment is recorded, locked
-- (stripe_events_lock_parked, SKIP LOCKED) so that two transactions never re-apply the same one at once.
SELECT p.event_id::text AS event_id, p.payload::jsonb AS payload
FROM stripe_events_lock_parked(@payment_intent::text) AS p (event_id, payload);

-- name: StripeEventsParkedWaiting :many
-- Which of the payments have events parked waiting for them (unknown_payment): a Checkout Session's happy
-- path, run after StripeEventsLockPayments and TopupsPay, leaves such a payment to the general path,
-- which re-applies them. This statement's snapshot sees a refund parked while that lock was awaited.
SELECT DISTINCT payment_intent::text AS payment_intent
FROM stripe_events
WHERE outcome = 'parked'
  AND parked_reason = 'unknown_payment'
  AND payment_intent = ANY(@payment_intents::text[]);

-- name: StripeEventsParkedRefundedForPayment :many
-- The charge.refunded events parked waiting for a payment, read without locking them: a top-up fetches
-- their refund lists from Stripe before its transaction, which then locks and re-applies them
-- (StripeEventsParkedForPayment). Locking here would make that SKIP LOCKED pass over them.
SELECT event_id, payload
FROM stripe_events
WHERE outcome = 'parked'
  AND parked_reason = 'unknown_payment'
  AND payment_intent = @payment_intent::text
  AND type = 'charge.refunded'
ORDER BY seq;

-- name: StripeEventsList :many
-- Stored events in arrival order, optionally of one outcome, after seq after_seq (keyset pagination:
-- stable while new events arrive, since seq only grows).
SELECT event_id, seq, type, api_version, livemode, created, received_at, outcome, parked_reason, payment_intent, outcome_at, reviewed_at
FROM stripe_events
WHERE (sqlc.narg(outcome)::text IS NULL OR outcome = sqlc.narg(outcome)::text)
  AND seq > @after_seq
ORDER BY seq
LIMIT @max_rows;

-- name: StripeEventsParkedUnreviewed :many
-- Parked events received before cutoff that no operator has looked at (verify). Parking keeps an event
-- safe, not finished: one left alone this long needs a person.
SELECT event_id, type, parked_reason::text AS parked_reason, received_at
FROM stripe_events
WHERE outcome = 'parked'
  AND reviewed_at IS NULL
  AND received_at < @cutoff
ORDER BY seq;

-- name: StripeEventsParkedReviewed :many
-- Parked events received before cutoff that verify does not report because someone reviewed them:
-- verify names who, so that the silencing is never anonymous. Events reviewed before reviewers were
-- named have reviewed_by NULL.
SELECT event_id, type, parked_reason::text AS parked_reason, received_at, reviewed_at::timestamptz AS reviewed_at,
       coalesce(reviewed_by, '')::text AS reviewed_by
FROM stripe_events
WHERE outcome = 'parked'
  AND reviewed_at IS NOT NULL
  AND received_at < @cutoff
ORDER BY seq;

-- name: StripeEventsLock :one
-- Locks the stored event until the transaction ends, so that a replay and the un-parking of the same
-- event never re-apply it at once. Returns no row when the event was never received.
SELECT event_id
FROM stripe_events
WHERE event_id = @event_id
FOR UPDATE;

-- name: StripeEventsLockPayment :exec
-- Serialises, until the transaction ends, every transaction that resolves or records one payment: a
-- refund or dispute looking for the payment's order, and the top-up recording it. Without it a refund
-- could park as unknown_payment while the top-up commits unseen, and stay parked. Two payments whose
-- ids hash alike only wait for each other.
SELECT pg_advisory_xact_lock(hashtextextended(@payment_intent::text, 0));

-- name: StripeEventsLockPayments :exec
-- StripeEventsLockPayment for a group of payments, taken in payment order: two groups, or a group and
-- a single transaction, never hold one payment each while waiting for the other's.
SELECT count(pg_advisory_xact_lock(hashtextextended(ordered.payment_intent, 0)))
FROM (SELECT DISTINCT payment_intent FROM unnest(@payment_intents::text[]) AS p (payment_intent)
      ORDER BY payment_intent) AS ordered;

-- name: StripeEventsMarkReviewed :execrows
-- Records that an operator looked at a parked event, so that verify stops reporting it as left
-- unreviewed; it stays parked until a replay applies it. Touches parked events only: returns 0 rows
-- when the event was never received or is not parked. reviewed_by names who looked.
UPDATE stripe_events
SET reviewed_at = now(),
    reviewed_by = @reviewed_by::text
WHERE event_id = @event_id
  AND outcome = 'parked';

-- name: StripeEventsExists :one
-- Whether the event was already recorded. A read before the transaction, to spare a redelivery work
-- it does not need (listing a charge's refunds from Stripe); StripeEventsInsert, not this, decides.
SELECT EXISTS (SELECT 1 FROM stripe_events WHERE event_id = @event_id) AS recorded;

-- name: StripeEventsParkedByReason :many
-- Parked events per parking reason (the operator console's overview): how many, how many no operator
-- has reviewed, and when the oldest arrived. Reads only parked rows (stripe_events_outcome_seq_idx).
SELECT parked_reason::text AS parked_reason,
       count(*)::bigint AS events,
       (count(*) FILTER (WHERE reviewed_at IS NULL))::bigint AS unreviewed,
       min(received_at)::timestamptz AS oldest_received_at
FROM stripe_events
WHERE outcome = 'parked'
GROUP BY parked_reason
ORDER BY parked_reason;

-- name: StripeEventsParkedByPaymentIntent :many
-- The parked events of one payment, in arrival order (the console's search). Only parked ones:
-- stripe_events_parked_payment_idx covers those, and the applied events of a payment are found
-- through its entries' dedupe keys and its order's paid_event_id instead.
SELECT event_id, seq, type, api_version, livemode, created, received_at, outcome, parked_reason, payment_intent, outcome_at, reviewed_at
FROM stripe_events
WHERE outcome = 'parked'
  AND payment_intent = @payment_intent::text
ORDER BY seq
LIMIT @max_rows;

-- name: StripeEventsCheckoutState :one
-- What a Checkout Session's completion needs to know before its transaction, in one read
-- (checkout_state): whether the event was recorded already, the session's order, the account it credits
-- and whether events are parked waiting for the payment. It decides only which path the event takes: the
-- happy path's own statements (StripeEventsInsert, StripeEventsLockPayment, TopupsPay,
-- StripeEventsParkedWaiting, LedgerAppend) hold the money's guarantees again (an event once, an order paid
-- once and only for its amount and currency, the credit once, nothing left parked), whatever changed
-- since this read.
SELECT checkout_state(@event_id::text, @session_id::text, @metadata_account_id::text, @payment_intent::text)::jsonb AS state;

-- name: StripeEventsParkedForObjects :many
-- The parked events of the given payments whose object (data.object.id) is one of object_ids, newest
-- first: the events whose replay would post what the drift pass found missing (a session's or
-- PaymentIntent's completion, a refund's, a charge's refunds, a dispute's).
-- stripe_events_parked_payment_idx finds the payments' parked events; the object is checked on those.
SELECT event_id, payment_intent::text AS payment_intent, (payload #>> '{data,object,id}')::text AS object_id
FROM stripe_events
WHERE outcome = 'parked'
  AND payment_intent = ANY(@payment_intents::text[])
  AND payload #>> '{data,object,id}' = ANY(@object_ids::text[])
ORDER BY seq DESC;
