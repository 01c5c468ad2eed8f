package stripeevents

import (
	"cmp"
	"context"
	"errors"
	"strings"

	"github.com/stripe/stripe-go/v79"

	"github.com/onceledger/onceledger/db"
)

// paymentIntentTypes resolve recharge attempts (SPEC §13) and save cards; payment_intent.succeeded is
// the only event that credits a recharge.
var paymentIntentTypes = []string{"payment_intent.succeeded", "payment_intent.payment_failed", "payment_intent.requires_action"}

// authenticationRequired is Stripe's last_payment_error.code for an off-session payment that needs the
// customer (3-D Secure): the attempt pauses, it does not count as a failure.
const authenticationRequired = "authentication_required"

// paymentIntentObject is a PaymentIntent as its events carry it.
type paymentIntentObject struct {
	ID               string            `json:"id"`
	Amount           int64             `json:"amount"`
	Currency         string            `json:"currency"`
	Customer         ref               `json:"customer"`
	PaymentMethod    ref               `json:"payment_method"`
	SetupFutureUsage string            `json:"setup_future_usage"`
	Metadata         map[string]string `json:"metadata"`
	LastPaymentError *struct {
		Code        string `json:"code"`
		DeclineCode string `json:"decline_code"`
	} `json:"last_payment_error"`
}

func (pi *paymentIntentObject) ids() []string {
	return []string{pi.ID, pi.Customer.ID, pi.PaymentMethod.ID, pi.Metadata["topup_id"], pi.Metadata["account_id"]}
}

func (pi paymentIntentObject) failureCode() string {
	if pi.LastPaymentError == nil {
		return ""
	}
	return pi.LastPaymentError.Code
}

// declineCode is what the card's issuer said (decline_code), or Stripe's code when the issuer said
// nothing more (expired_card, incorrect_number): what tells a hard decline from a soft one.
func (pi paymentIntentObject) declineCode() string {
	if pi.LastPaymentError == nil {
		return ""
	}
	return cmp.Or(pi.LastPaymentError.DeclineCode, pi.LastPaymentError.Code)
}

// paymentIntentEffects: a PaymentIntent whose metadata names a recharge attempt's order resolves the
// attempt (and, succeeded, credits the order); one of a Checkout order that saved its card records the
// card on the account. Anything else is recorded: a Checkout payment is credited by its session.
func (p *Processor) paymentIntentEffects(ctx context.Context, tx db.Tx, ev event, pi paymentIntentObject, prefetched map[string]refundLister) (outcome, error) {
	recorded := outcome{status: OutcomeRecorded, paymentIntent: pi.ID}
	topupID := pi.Metadata["topup_id"]
	if topupID == "" {
		return recorded, nil
	}
	order, err := db.GetTopup(ctx, tx, topupID)
	if errors.Is(err, db.ErrNotFound) {
		return recorded, nil
	}
	if err != nil {
		return outcome{}, err
	}
	attempt, err := db.AttemptByTopup(ctx, tx, order.AccountID, order.ID)
	if errors.Is(err, db.ErrNotFound) {
		return recorded, p.saveCard(ctx, tx, ev, order, pi)
	}
	if err != nil {
		return outcome{}, err
	}
	switch ev.Type {
	case "payment_intent.succeeded":
		return p.rechargePaid(ctx, tx, ev, order, attempt, pi, prefetched)
	case "payment_intent.payment_failed":
		status := db.AttemptFailed
		if pi.failureCode() == authenticationRequired {
			status = db.AttemptActionRequired
		}
		return resolveAttempt(ctx, tx, attempt, status, pi)
	default: // payment_intent.requires_action
		return resolveAttempt(ctx, tx, attempt, db.AttemptActionRequired, pi)
	}
}

// saveCard records the card of a succeeded Checkout payment made to be reused off-session, when its
// customer is the account's (recorded when the API created the session).
func (p *Processor) saveCard(ctx context.Context, tx db.Tx, ev event, order db.Topup, pi paymentIntentObject) error {
	if ev.Type != "payment_intent.succeeded" || pi.SetupFutureUsage != "off_session" || pi.Customer.ID == "" || pi.PaymentMethod.ID == "" {
		return nil
	}
	_, err := db.SetPaymentMethod(ctx, tx, order.AccountID, pi.Customer.ID, pi.PaymentMethod.ID)
	return err
}

// rechargePaid moves the attempt's order from pending to paid and credits it, once, through the same
// guard and credit as a Checkout order: three deliveries (or three events) of one payment credit once.
func (p *Processor) rechargePaid(ctx context.Context, tx db.Tx, ev event, order db.Topup, attempt db.Attempt, pi paymentIntentObject, prefetched map[string]refundLister) (outcome, error) {
	if pi.Amount > db.MaxAmount {
		return outcome{}, park(ReasonAmountOutOfRange, pi.ID)
	}
	if pi.Amount != order.Amount || !strings.EqualFold(pi.Currency, order.Currency) {
		return outcome{}, park(ReasonAmountMismatch, pi.ID)
	}
	out := outcome{status: OutcomeApplied, paymentIntent: pi.ID}
	// The order has no session: named by its id. Its payment is this PaymentIntent.
	order.SessionID, order.PaymentIntent = "", pi.ID
	paidOrder, paid, err := db.PayTopup(ctx, tx, order, ev.ID)
	if errors.Is(err, db.ErrDedupeConflict) {
		return outcome{}, &parked{reason: ReasonDedupeConflict, paymentIntent: pi.ID, cause: err}
	}
	if err != nil {
		return outcome{}, err
	}
	if paid {
		if err := p.creditOrder(ctx, tx, &out, ev, paidOrder, "auto-recharge "+order.ID, prefetched); err != nil {
			return outcome{}, err
		}
	}
	// A payment completed after the attempt paused (the customer authenticated) still pays it.
	if _, _, err := db.ResolveAttempt(ctx, tx, attempt, db.AttemptSucceeded, pi.ID, "", ""); err != nil {
		return outcome{}, err
	}
	return out, nil
}

// resolveAttempt fails or pauses the attempt, once: applied when this event did it.
func resolveAttempt(ctx context.Context, tx db.Tx, attempt db.Attempt, status string, pi paymentIntentObject) (outcome, error) {
	resolved, _, err := db.ResolveAttempt(ctx, tx, attempt, status, pi.ID, pi.failureCode(), pi.declineCode())
	if err != nil {
		return outcome{}, err
	}
	if !resolved {
		return outcome{status: OutcomeRecorded, paymentIntent: pi.ID}, nil
	}
	return outcome{status: OutcomeApplied, paymentIntent: pi.ID}, nil
}

// savedCard is a card saved for off-session use, with the customer it belongs to.
type savedCard struct {
	customer, paymentMethod string
}

// prefetchCard asks Stripe, before the transaction, for the card a completed Checkout Session saved
// (save_payment_method): the session names the customer, only its PaymentIntent names the card. Best
// effort, under the caller's short deadline (creditWait): the credit does not wait for more, and the
// payment's payment_intent.succeeded records the card too.
func (p *Processor) prefetchCard(ctx context.Context, ev event) *savedCard {
	if ev.Type != "checkout.session.completed" && ev.Type != "checkout.session.async_payment_succeeded" || p.Stripe == nil {
		return nil
	}
	var s checkoutSession
	if ev.object(&s) != nil || s.Customer.ID == "" || s.PaymentIntent.ID == "" {
		return nil
	}
	params := &stripe.PaymentIntentParams{}
	params.Context = ctx
	pi, err := p.Stripe.PaymentIntents.Get(s.PaymentIntent.ID, params)
	if err != nil {
		p.Log.WarnContext(ctx, "saved card not fetched: its payment_intent.succeeded will record it", "event", ev.ID, "err", err)
		return nil
	}
	if pi.SetupFutureUsage != stripe.PaymentIntentSetupFutureUsageOffSession || pi.Customer == nil || pi.PaymentMethod == nil ||
		checkIDs(pi.Customer.ID, pi.PaymentMethod.ID) != nil {
		return nil
	}
	return &savedCard{customer: pi.Customer.ID, paymentMethod: pi.PaymentMethod.ID}
}

// saveSessionCard records the card prefetched for a completed session on the account of its order.
func saveSessionCard(ctx context.Context, tx db.Tx, s checkoutSession, card *savedCard) error {
	if card == nil {
		return nil
	}
	order, err := db.TopupBySession(ctx, tx, s.ID)
	if errors.Is(err, db.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = db.SetPaymentMethod(ctx, tx, order.AccountID, card.customer, card.paymentMethod)
	return err
}
