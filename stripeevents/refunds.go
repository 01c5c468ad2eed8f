package stripeevents

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/stripe/stripe-go/v79"
)

// refundLister returns the refunds of the charge a charge.refunded event carries.
type refundLister func(ctx context.Context, c charge) ([]refund, error)

// prefetchRefunds lists charge.refunded's refunds before the transaction begins, so that no Stripe call
// is made while rows are locked. An unavailable list that will not get better by retrying (no API key,
// a 4xx) is handed on and parks the event inside the transaction; a transient failure is returned, and
// the delivery is answered 503 with nothing written.
func (p *Processor) prefetchRefunds(ctx context.Context, ev event) (refundLister, error) {
	if ev.Type != "charge.refunded" || p.otherMode(ev) {
		// Another mode's event parks without effects: nothing to ask Stripe.
		return p.refundsOf, nil
	}
	var c charge
	if err := ev.object(&c); err != nil {
		return nil, err
	}
	list, err := p.refundsOf(ctx, c)
	if errors.Is(err, ErrStripeUnavailable) {
		return nil, err
	}
	return func(context.Context, charge) ([]refund, error) { return list, err }, nil
}

// refundsOf returns every refund of the charge: the payload's list when it is complete (API versions
// before 2022-11-15), else all pages of the Stripe API's list. Never the charge's cumulative
// amount_refunded.
func (p *Processor) refundsOf(ctx context.Context, c charge) ([]refund, error) {
	if listed, ok := c.listedRefunds(); ok {
		return listed, nil
	}
	if c.ID == "" {
		return nil, fmt.Errorf("%w: charge.refunded without a charge id", ErrInvalidEvent)
	}
	if p.Stripe == nil {
		return nil, park(ReasonRefundListUnavailable, c.PaymentIntent.ID)
	}
	params := &stripe.RefundListParams{Charge: stripe.String(c.ID)}
	params.Context = ctx
	var out []refund
	it := p.Stripe.Refunds.List(params)
	for it.Next() {
		r := it.Refund()
		listed := refund{ID: r.ID, Amount: r.Amount, Currency: string(r.Currency), Status: string(r.Status)}
		if r.PaymentIntent != nil {
			listed.PaymentIntent.ID = r.PaymentIntent.ID
		}
		out = append(out, listed)
	}
	if err := it.Err(); err != nil {
		var stripeErr *stripe.Error
		if errors.As(err, &stripeErr) && stripeErr.HTTPStatusCode >= 400 && stripeErr.HTTPStatusCode < 500 &&
			stripeErr.HTTPStatusCode != http.StatusTooManyRequests {
			// A refused request (bad key, unknown charge) is not fixed by retrying: park it for an operator.
			return nil, &parked{reason: ReasonRefundListUnavailable, paymentIntent: c.PaymentIntent.ID, cause: err}
		}
		return nil, fmt.Errorf("%w: list refunds of %s: %w", ErrStripeUnavailable, c.ID, err)
	}
	return out, nil
}
