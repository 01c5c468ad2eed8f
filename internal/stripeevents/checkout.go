package stripeevents

import (
	"context"
	"fmt"
	"strings"

	"github.com/onceledger/onceledger/db"
)

// payCheckout is the happy path of a paid Checkout Session's delivery, the webhook's commonest: one
// read before any transaction (db.Ledger.ReadCheckoutState), which answers a redelivery at once, then,
// when the read says the general path would credit the order and do nothing else, db.Ledger.PayCheckout's
// transaction in two more round trips (with the concurrent deliveries' own, when the Ledger groups them).
// done is false when the event is left to the general path:
// another type, a session that is not plainly payable (unpaid, saving a card, an amount out of range),
// or a state the general path decides (an order paid, expired or of another amount, an unknown account
// or currency, events parked for the payment), and also when PayCheckout found, in its transaction,
// that things had changed since the read. Nothing was written then.
func (p *Processor) payCheckout(ctx context.Context, ev event, raw []byte) (res Result, done bool, err error) {
	if ev.Type != "checkout.session.completed" && ev.Type != "checkout.session.async_payment_succeeded" || p.otherMode(ev) {
		return Result{}, false, nil
	}
	var s checkoutSession
	if ev.object(&s) != nil {
		return Result{}, false, nil
	}
	paymentIntent := s.PaymentIntent.ID
	if ev.Type == "checkout.session.completed" && s.PaymentStatus != "paid" || s.ID == "" || paymentIntent == "" ||
		s.AmountTotal <= 0 || s.AmountTotal > db.MaxAmount || s.Customer.ID != "" {
		return Result{}, false, nil
	}
	state, err := p.Ledger.ReadCheckoutState(ctx, ev.ID, s.ID, s.accountID(), paymentIntent)
	if err != nil {
		return Result{EventID: ev.ID, Type: ev.Type}, true, fmt.Errorf("event %s (%s): %w", ev.ID, ev.Type, err)
	}
	if state.Recorded {
		return p.duplicate(ctx, ev), true, nil
	}
	if !payable(state, s) {
		return Result{}, false, nil
	}
	payment := db.CheckoutPayment{
		Event: ev.stored(raw, OutcomeApplied, paymentIntent),
		Order: db.Topup{
			ID: s.ID, AccountID: state.Account.ID, SessionID: s.ID, PaymentIntent: paymentIntent,
			Amount: s.AmountTotal, Currency: s.Currency,
		},
		Credit: db.Posting{Kind: db.KindTopup, Description: "Stripe Checkout " + s.ID, DedupeKey: "stripe:" + ev.ID},
	}
	if state.Order != nil {
		// The order is the contract: it buys its credits (payable checked its price and currency).
		payment.Order.Credits = state.Order.Credits
	}
	payCtx, span := p.Tracing.Start(ctx, "stripe_event.pay_checkout")
	paid, posted, err := p.Ledger.PayCheckout(payCtx, payment)
	span.End()
	switch {
	case err != nil:
		return Result{EventID: ev.ID, Type: ev.Type}, true, fmt.Errorf("event %s (%s): %w", ev.ID, ev.Type, err)
	case paid == db.CheckoutDuplicate:
		return p.duplicate(ctx, ev), true, nil
	case paid == db.CheckoutNotPaid:
		return Result{}, false, nil
	}
	out := outcome{
		status: OutcomeApplied, paymentIntent: paymentIntent, credited: true, posted: []string{posted.Entry.DedupeKey},
	}
	p.logOutcome(ctx, "stripe event", ev, out)
	return out.result(ev), true, nil
}

// payable: the general path would credit this session's order and park nothing. Its order, if any, is
// pending with the session's amount and currency, the account exists in that currency, no event waits
// for the payment, and the happy path runs here (plain PostgreSQL).
func payable(state db.CheckoutState, s checkoutSession) bool {
	if state.GeneralPath || state.ParkedWaiting || state.Account == nil || !strings.EqualFold(state.Account.Currency, s.Currency) {
		return false
	}
	if o := state.Order; o != nil {
		return o.Status == db.TopupPending && o.Amount == s.AmountTotal && strings.EqualFold(o.Currency, s.Currency)
	}
	return true
}
