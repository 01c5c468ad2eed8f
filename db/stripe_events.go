package db

import (
	"context"
	"fmt"
	"time"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// Event is one stored Stripe event (a stripe_events row). Empty strings mean none.
type Event struct {
	ID            string
	Seq           int64
	Type          string
	APIVersion    string
	Livemode      bool
	Created       time.Time
	Payload       []byte // raw event JSON; not filled by ListEvents
	ReceivedAt    time.Time
	Outcome       string
	ParkedReason  string
	PaymentIntent string
	OutcomeAt     time.Time
	ReviewedAt    *time.Time // nil: never reviewed
}

// ParkedEvent is an event waiting for its payment: enough to re-apply it.
type ParkedEvent struct {
	ID      string
	Payload []byte
}

// RecordEvent records a verified event with its first outcome, in the transaction that applies it
// (ID, Type, APIVersion, Livemode, Created, Payload, Outcome, ParkedReason and PaymentIntent are
// stored). duplicate is true when the event id was already recorded (stripe_events_pkey): the event
// was processed and nothing else must be done. A concurrent delivery of the same event waits for the
// first transaction, then is a duplicate.
func RecordEvent(ctx context.Context, q Conn, e Event) (duplicate bool, err error) {
	_, err = dbsqlc.New(q).StripeEventsInsert(ctx, eventInsert(e))
	if isNoRows(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("record event %s: %w", e.ID, MapError(err))
	}
	return false, nil
}

// eventInsert is what StripeEventsInsert stores of e.
func eventInsert(e Event) dbsqlc.StripeEventsInsertParams {
	return dbsqlc.StripeEventsInsertParams{
		EventID: e.ID, Type: e.Type, APIVersion: e.APIVersion, Livemode: e.Livemode, Created: e.Created,
		Payload: e.Payload, Outcome: e.Outcome, ParkedReason: nullable(e.ParkedReason), PaymentIntent: nullable(e.PaymentIntent),
	}
}

// EventRecorded reports whether the event was already recorded: a read outside the transaction, to
// spare a redelivery work it does not need. RecordEvent, not this, decides.
func EventRecorded(ctx context.Context, q Conn, eventID string) (bool, error) {
	recorded, err := dbsqlc.New(q).StripeEventsExists(ctx, eventID)
	if err != nil {
		return false, fmt.Errorf("look up event %s: %w", eventID, MapError(err))
	}
	return recorded, nil
}

// SetEventOutcome records the outcome of (re-)applying a stored event. An empty paymentIntent keeps
// the one stored.
func SetEventOutcome(ctx context.Context, q Conn, eventID, outcome, parkedReason, paymentIntent string) error {
	_, err := dbsqlc.New(q).StripeEventsSetOutcome(ctx, dbsqlc.StripeEventsSetOutcomeParams{
		EventID: eventID, Outcome: outcome, ParkedReason: nullable(parkedReason), PaymentIntent: nullable(paymentIntent),
	})
	if err != nil {
		return fmt.Errorf("record outcome of %s: %w", eventID, MapError(err))
	}
	return nil
}

// GetEvent returns the stored event, or ErrNotFound when it was never received.
func GetEvent(ctx context.Context, q Conn, eventID string) (Event, error) {
	r, err := dbsqlc.New(q).StripeEventsGet(ctx, eventID)
	if isNoRows(err) {
		return Event{}, fmt.Errorf("stripe event %s: %w", eventID, ErrNotFound)
	}
	if err != nil {
		return Event{}, fmt.Errorf("read stripe event %s: %w", eventID, MapError(err))
	}
	return Event{
		ID: r.EventID, Seq: r.Seq, Type: r.Type, APIVersion: r.APIVersion, Livemode: r.Livemode, Created: r.Created,
		Payload: r.Payload, ReceivedAt: r.ReceivedAt, Outcome: r.Outcome, ParkedReason: deref(r.ParkedReason),
		PaymentIntent: deref(r.PaymentIntent), OutcomeAt: r.OutcomeAt, ReviewedAt: r.ReviewedAt,
	}, nil
}

// LockEvent locks the stored event until tx ends, so that a replay and the un-parking of the same
// event never re-apply it at once. ErrNotFound when it was never received.
func LockEvent(ctx context.Context, tx Tx, eventID string) error {
	_, err := dbsqlc.New(tx).StripeEventsLock(ctx, eventID)
	if isNoRows(err) {
		return fmt.Errorf("lock stripe event %s: %w", eventID, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("lock stripe event %s: %w", eventID, MapError(err))
	}
	return nil
}

// LockPayment serialises, until tx ends, every transaction that resolves or records one payment (see
// StripeEventsLockPayment): a refund cannot park as unknown_payment while its top-up commits unseen.
func LockPayment(ctx context.Context, tx Tx, paymentIntent string) error {
	if err := dbsqlc.New(tx).StripeEventsLockPayment(ctx, paymentIntent); err != nil {
		return fmt.Errorf("lock payment %s: %w", paymentIntent, MapError(err))
	}
	return nil
}

// ParkedEventsForPayment returns the events parked as unknown_payment for this payment, in arrival
// order, locked until tx ends (stripe_events_lock_parked, SKIP LOCKED: one being replayed right now is
// not returned).
func ParkedEventsForPayment(ctx context.Context, tx Tx, paymentIntent string) ([]ParkedEvent, error) {
	rows, err := dbsqlc.New(tx).StripeEventsParkedForPayment(ctx, paymentIntent)
	if err != nil {
		return nil, fmt.Errorf("find events parked for %s: %w", paymentIntent, MapError(err))
	}
	out := make([]ParkedEvent, len(rows))
	for i, r := range rows {
		out[i] = ParkedEvent{ID: r.EventID, Payload: r.Payload}
	}
	return out, nil
}

// ParkedRefundedForPayment returns the charge.refunded events parked waiting for paymentIntent, without
// locking them: what a top-up prefetches refund lists for before its transaction.
func ParkedRefundedForPayment(ctx context.Context, q Conn, paymentIntent string) ([]ParkedEvent, error) {
	rows, err := dbsqlc.New(q).StripeEventsParkedRefundedForPayment(ctx, paymentIntent)
	if err != nil {
		return nil, fmt.Errorf("find charge.refunded events parked for %s: %w", paymentIntent, MapError(err))
	}
	out := make([]ParkedEvent, len(rows))
	for i, r := range rows {
		out[i] = ParkedEvent{ID: r.EventID, Payload: r.Payload}
	}
	return out, nil
}

// ListEvents returns at most limit stored events after seq afterSeq in arrival order (keyset
// pagination), only those of outcome when it is not empty. Payloads are left out.
func ListEvents(ctx context.Context, q Conn, outcome string, afterSeq int64, limit int32) ([]Event, error) {
	rows, err := dbsqlc.New(q).StripeEventsList(ctx, dbsqlc.StripeEventsListParams{
		Outcome: nullable(outcome), AfterSeq: afterSeq, MaxRows: limit,
	})
	if err != nil {
		return nil, fmt.Errorf("list stripe events: %w", MapError(err))
	}
	out := make([]Event, len(rows))
	for i, r := range rows {
		out[i] = eventFromListRow(r)
	}
	return out, nil
}

// ParkedEventsOfPayment returns at most limit parked events of one payment, in arrival order, for
// operators. Payloads are left out.
func ParkedEventsOfPayment(ctx context.Context, q Conn, paymentIntent string, limit int32) ([]Event, error) {
	rows, err := dbsqlc.New(q).StripeEventsParkedByPaymentIntent(ctx, dbsqlc.StripeEventsParkedByPaymentIntentParams{
		PaymentIntent: paymentIntent, MaxRows: limit,
	})
	if err != nil {
		return nil, fmt.Errorf("list parked events of %s: %w", paymentIntent, MapError(err))
	}
	out := make([]Event, len(rows))
	for i, r := range rows {
		// The same columns as StripeEventsList's.
		out[i] = eventFromListRow(dbsqlc.StripeEventsListRow(r))
	}
	return out, nil
}

// eventFromListRow is an event as listings read it: without its payload.
func eventFromListRow(r dbsqlc.StripeEventsListRow) Event {
	return Event{
		ID: r.EventID, Seq: r.Seq, Type: r.Type, APIVersion: r.APIVersion, Livemode: r.Livemode, Created: r.Created,
		ReceivedAt: r.ReceivedAt, Outcome: r.Outcome, ParkedReason: deref(r.ParkedReason),
		PaymentIntent: deref(r.PaymentIntent), OutcomeAt: r.OutcomeAt, ReviewedAt: r.ReviewedAt,
	}
}

// MarkReviewed records that reviewer (an API key's name, or the operator at the command line) looked at
// a parked event, so that verify stops reporting it as left unreviewed and names them instead; it stays
// parked. reviewed is false when the event was never received or is not parked.
func MarkReviewed(ctx context.Context, q Conn, eventID, reviewer string) (reviewed bool, err error) {
	n, err := dbsqlc.New(q).StripeEventsMarkReviewed(ctx, dbsqlc.StripeEventsMarkReviewedParams{EventID: eventID, ReviewedBy: reviewer})
	if err != nil {
		return false, fmt.Errorf("mark %s reviewed: %w", eventID, MapError(err))
	}
	return n > 0, nil
}
