package db

import (
	"context"
	"fmt"
	"time"

	"github.com/onceledger/onceledger/db/dbsqlc"
)

// Event is one stored Stripe event (a stripe_events row). Empty strings mean none.
type Event struct {
	ID            string
	Seq           int64
	Type          string
	APIVersion    string
	Livemode      bool
	Created       time.Time
	Payload       []byte // raw event JSON; only GetEvent fills it
	ReceivedAt    time.Time
	Outcome       string
	ParkedReason  string
	PaymentIntent string
	OutcomeAt     time.Time
	ReviewedAt    *time.Time // nil: never reviewed
}

// GetEvent returns the stored event with its payload, or ErrNotFound when it was never received.
func GetEvent(ctx context.Context, q dbsqlc.DBTX, eventID string) (Event, error) {
	r, err := dbsqlc.New(q).StripeEventGet(ctx, eventID)
	if isNoRows(err) {
		return Event{}, fmt.Errorf("stripe event %s: %w", eventID, ErrNotFound)
	}
	if err != nil {
		return Event{}, fmt.Errorf("read stripe event %s: %w", eventID, MapError(err))
	}
	return Event{
		ID: r.EventID, Seq: r.Seq, Type: r.Type, APIVersion: r.ApiVersion, Livemode: r.Livemode, Created: r.Created,
		Payload: r.Payload, ReceivedAt: r.ReceivedAt, Outcome: r.Outcome, ParkedReason: deref(r.ParkedReason),
		PaymentIntent: deref(r.PaymentIntent), OutcomeAt: r.OutcomeAt, ReviewedAt: r.ReviewedAt,
	}, nil
}

// ListEvents returns at most limit stored events after seq afterSeq in arrival order (keyset
// pagination), only those of outcome when it is not empty. Payloads are left out.
func ListEvents(ctx context.Context, q dbsqlc.DBTX, outcome string, afterSeq int64, limit int32) ([]Event, error) {
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

// ParkedEventsOfPayment returns at most limit parked events of one payment, in arrival order.
// Payloads are left out.
func ParkedEventsOfPayment(ctx context.Context, q dbsqlc.DBTX, paymentIntent string, limit int32) ([]Event, error) {
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
		ID: r.EventID, Seq: r.Seq, Type: r.Type, APIVersion: r.ApiVersion, Livemode: r.Livemode, Created: r.Created,
		ReceivedAt: r.ReceivedAt, Outcome: r.Outcome, ParkedReason: deref(r.ParkedReason),
		PaymentIntent: deref(r.PaymentIntent), OutcomeAt: r.OutcomeAt, ReviewedAt: r.ReviewedAt,
	}
}

// MarkReviewed records that an operator looked at a parked event, so that verify stops reporting it
// as left unreviewed; it stays parked. reviewed is false when the event was never received or is not
// parked.
func MarkReviewed(ctx context.Context, q dbsqlc.DBTX, eventID string) (reviewed bool, err error) {
	n, err := dbsqlc.New(q).StripeEventMarkReviewed(ctx, eventID)
	if err != nil {
		return false, fmt.Errorf("mark %s reviewed: %w", eventID, MapError(err))
	}
	return n > 0, nil
}
