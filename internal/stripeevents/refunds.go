package stripeevents

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v79"

	"github.com/onceledger/onceledger/db"
)

// refundLister returns the refunds of the charge a charge.refunded event carries.
type refundLister func(ctx context.Context, c charge) ([]refund, error)

// fetched is what an event's effects need from the Stripe API, fetched before its transaction begins so
// that no Stripe call is made while rows are locked.
type fetched struct {
	// refunds lists the refunds of a charge.refunded event.
	refunds refundLister
	// parked lists, by event id, the refunds of the charge.refunded events parked waiting for a top-up's
	// payment. One missing (Stripe unavailable, or parked after this look) is re-applied by a job
	// after the top-up commits.
	parked map[string]refundLister
	// card is the card a completed Checkout Session saved (its PaymentIntent's customer and payment
	// method), when Stripe could tell; nil otherwise (its payment_intent.succeeded records it then).
	card *savedCard
}

// creditWait bounds how long a top-up's delivery waits on Stripe before its credit, for the refund lists
// of the events parked for its payment and the card it saved together. What Stripe has not answered by
// then is done without it (a job re-applies such a parked event after commit; the payment's
// payment_intent.succeeded records the card), so a Stripe that hangs delays a credit by this at most.
const creditWait = 1500 * time.Millisecond

// prefetch asks Stripe, before the transaction, for what applying ev will need: the payment of a refund
// or dispute that names only its charge (set on ev), the refund list of a charge.refunded, and, for a
// top-up, the refund lists of the events it will un-park and the card it saved. An event of the other
// mode needs nothing (it parks). A transient failure is returned, and the delivery is answered 503
// with nothing written, except for a top-up's lookups: a top-up is credited whatever Stripe says, within
// creditWait.
func (p *Processor) prefetch(ctx context.Context, ev *event) (fetched, error) {
	if p.otherMode(*ev) {
		return fetched{refunds: p.refundsOf}, nil
	}
	if err := p.resolveCharge(ctx, ev); err != nil {
		return fetched{}, err
	}
	refunds, err := p.prefetchRefunds(ctx, *ev)
	if err != nil {
		return fetched{}, err
	}
	creditCtx, cancel := context.WithTimeout(ctx, creditWait)
	defer cancel()
	parked, err := p.prefetchParked(ctx, creditCtx, *ev)
	if err != nil {
		return fetched{}, err
	}
	return fetched{refunds: refunds, parked: parked, card: p.prefetchCard(creditCtx, *ev)}, nil
}

// resolveCharge finds, through the Stripe API, the payment_intent of a refund or dispute that names only
// its charge (API versions that did not render it). Without an API key, or when Stripe does not know
// the charge, the event goes on without one (and parks unknown_payment unless its charge names the
// account).
func (p *Processor) resolveCharge(ctx context.Context, ev *event) error {
	chargeID := ev.onlyCharge()
	if chargeID == "" || p.Stripe == nil {
		return nil
	}
	params := &stripe.ChargeParams{}
	params.Context = ctx
	c, err := p.Stripe.Charges.Get(chargeID, params)
	if refused(err) {
		p.Log.WarnContext(ctx, "charge of a refund or dispute not found", "event", ev.ID, "charge", chargeID, "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: retrieve charge %s: %w", ErrStripeUnavailable, chargeID, err)
	}
	if c.PaymentIntent != nil {
		if err := checkIDs(c.PaymentIntent.ID); err != nil {
			return err
		}
		ev.chargePaymentIntent = c.PaymentIntent.ID
	}
	return nil
}

// prefetchRefunds lists charge.refunded's refunds. An unavailable list that will not get better by
// retrying (no API key, a 4xx) is handed on and parks the event inside the transaction; a transient
// failure is returned.
func (p *Processor) prefetchRefunds(ctx context.Context, ev event) (refundLister, error) {
	if ev.Type != "charge.refunded" {
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

// prefetchParked lists the refunds of the charge.refunded events parked waiting for a top-up's payment,
// which the top-up will re-apply; the Stripe calls run under stripeCtx. Stripe being unavailable, or
// not answering in time, leaves an event out (a job re-applies it after commit); the rows are only read
// here (never locked: the top-up's transaction locks them).
func (p *Processor) prefetchParked(ctx, stripeCtx context.Context, ev event) (map[string]refundLister, error) {
	paymentIntent := ev.paymentIntent()
	if (ev.Type != "checkout.session.completed" && ev.Type != "checkout.session.async_payment_succeeded") || paymentIntent == "" {
		return nil, nil
	}
	waiting, err := db.ParkedRefundedForPayment(ctx, p.Pool, paymentIntent)
	if err != nil {
		return nil, err
	}
	lists := map[string]refundLister{}
	for _, row := range waiting {
		parkedEv, err := parseEvent(row.Payload)
		if err != nil || !parkedEv.needsRefundList() {
			continue // re-applied without Stripe, or refused again in the transaction
		}
		lister, err := p.prefetchRefunds(stripeCtx, parkedEv)
		if err != nil {
			p.Log.WarnContext(ctx, "refund list of a parked event not fetched: re-applied after commit", "event", row.ID, "err", err)
			continue
		}
		lists[row.ID] = lister
	}
	return lists, nil
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
		if refused(err) {
			// A refused request (bad key, unknown charge) is not fixed by retrying: park it for an operator.
			return nil, &parked{reason: ReasonRefundListUnavailable, paymentIntent: c.PaymentIntent.ID, cause: err}
		}
		return nil, fmt.Errorf("%w: list refunds of %s: %w", ErrStripeUnavailable, c.ID, err)
	}
	return out, nil
}

// refused: Stripe answered a 4xx other than 429, which retrying does not fix.
func refused(err error) bool {
	var stripeErr *stripe.Error
	return errors.As(err, &stripeErr) && stripeErr.HTTPStatusCode >= 400 && stripeErr.HTTPStatusCode < 500 &&
		stripeErr.HTTPStatusCode != http.StatusTooManyRequests
}
