package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/stripe/stripe-go/v79"

	"github.com/onceledger/onceledger/internal/stripeevents"
)

// RecoveryReport says what one recovery pass did.
type RecoveryReport struct {
	// Skipped says why recovery did not run; empty when it did.
	Skipped string
	// Since is the start of the look-back window listed.
	Since time.Time
	// Listed events were undelivered; Applied were processed now; Duplicates had been processed
	// before (by the webhook or an earlier pass) and did nothing; Failed could not be processed.
	Listed, Applied, Duplicates, Failed int
	// Unrequested events were listed although not of a requested type: neither applied nor counted
	// as recovered.
	Unrequested int
}

// Recover lists the Stripe events of the handled types whose delivery has not succeeded, created
// within the look-back window (all pages), and feeds each to the event processor. Events already
// processed are no-ops there, so overlapping windows and concurrent passes are harmless. One event
// failing does not stop the others; the failures are returned together.
//
// No transaction is open while Stripe is called: each event's transaction is the processor's and
// commits before the next page is fetched.
func (r *Reconciler) Recover(ctx context.Context) (RecoveryReport, error) {
	switch {
	case r.stripe == nil:
		return RecoveryReport{Skipped: "STRIPE_SECRET_KEY not set"}, nil
	case r.events == nil:
		return RecoveryReport{Skipped: "no event processor"}, nil
	}
	rep := RecoveryReport{Since: time.Now().Add(-r.lookback).Truncate(time.Second)}
	params := &stripe.EventListParams{
		DeliverySuccess: stripe.Bool(false),
		Types:           stripe.StringSlice(stripeevents.MoneyMovingTypes),
		CreatedRange:    &stripe.RangeQueryParams{GreaterThanOrEqual: rep.Since.Unix()},
	}
	params.Limit = stripe.Int64(100)
	params.Context = ctx

	var failures []error
	it := r.stripe.Events.List(params)
	for it.Next() {
		event := it.Event()
		rep.Listed++
		if !slices.Contains(stripeevents.MoneyMovingTypes, string(event.Type)) {
			rep.Unrequested++
			continue
		}
		duplicate, err := r.process(ctx, event)
		switch {
		case err != nil:
			rep.Failed++
			failures = append(failures, fmt.Errorf("apply missed event %s (%s): %w", event.ID, event.Type, err))
		case duplicate:
			rep.Duplicates++
		default:
			rep.Applied++
			r.metrics.RecoveredEvents.Inc()
		}
	}
	if err := it.Err(); err != nil {
		failures = append(failures, fmt.Errorf("list missed Stripe events: %w", err))
	}
	return rep, errors.Join(failures...)
}

// process hands one listed event to the processor as JSON. A listed event carries no raw response of
// its own; stripe.Event marshals back to the fields the webhook reads (data.object stays raw). A
// duplicate is an event the webhook (or an earlier pass) already applied; a parked one is a success.
func (r *Reconciler) process(ctx context.Context, event *stripe.Event) (duplicate bool, err error) {
	raw, err := json.Marshal(event)
	if err != nil {
		return false, fmt.Errorf("encode event: %w", err)
	}
	res, err := r.events.Process(ctx, raw)
	return res.Duplicate, err
}
