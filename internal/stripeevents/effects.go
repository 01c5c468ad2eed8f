package stripeevents

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/onceledger/onceledger/db"
)

// MoneyMovingTypes are the event types whose effects can post entries (the cases of effects below):
// the ones worth recovering when their delivery failed. Stripe accepts at most 20 in one listing.
var MoneyMovingTypes = slices.Concat(
	[]string{"checkout.session.completed", "checkout.session.async_payment_succeeded", "charge.refunded"},
	refundTypes, disputeTypes, paymentIntentTypes,
)

// refundTypes carry one refund object; disputeTypes one dispute object (the cases of effects below).
var (
	refundTypes  = []string{"charge.refund.updated", "refund.created", "refund.updated", "refund.failed"}
	disputeTypes = []string{
		"charge.dispute.created", "charge.dispute.updated", "charge.dispute.closed",
		"charge.dispute.funds_withdrawn", "charge.dispute.funds_reinstated",
	}
)

// recordedTypes describe a payment the Checkout Session already credits: kept, never credited.
var recordedTypes = []string{"charge.succeeded"}

// Handles reports whether effects knows eventType (every other type is recorded as ignored).
func Handles(eventType string) bool {
	return slices.Contains(MoneyMovingTypes, eventType) || slices.Contains(recordedTypes, eventType) ||
		eventType == "checkout.session.expired"
}

// effects applies ev by its object's current state. Every entry it posts has a dedupe key naming the
// thing that happened (the payment, the refund, the dispute), never the event, except the top-up whose
// order's pending→paid transition guards it too: so any arrival order converges to one ledger.
func (p *Processor) effects(ctx context.Context, tx db.Tx, ev event, f fetched) (outcome, error) {
	switch ev.Type {
	case "checkout.session.completed", "checkout.session.async_payment_succeeded":
		var s checkoutSession
		if err := ev.object(&s); err != nil {
			return outcome{}, err
		}
		out, err := p.topup(ctx, tx, ev, s, f.parked)
		if err != nil {
			return outcome{}, err
		}
		return out, saveSessionCard(ctx, tx, s, f.card)

	case "checkout.session.expired":
		var s checkoutSession
		if err := ev.object(&s); err != nil {
			return outcome{}, err
		}
		return expire(ctx, tx, s)

	case "charge.succeeded":
		// The same payment as the Checkout Session: crediting it too would double it.
		return outcome{status: OutcomeRecorded}, nil

	case "payment_intent.succeeded", "payment_intent.payment_failed", "payment_intent.requires_action":
		var pi paymentIntentObject
		if err := ev.object(&pi); err != nil {
			return outcome{}, err
		}
		return p.paymentIntentEffects(ctx, tx, ev, pi, f.parked)

	case "charge.refund.updated", "refund.created", "refund.updated", "refund.failed":
		var r refund
		if err := ev.object(&r); err != nil {
			return outcome{}, err
		}
		return p.reverseAll(ctx, tx, ev.paymentIntent(), r.Charge.Metadata["account_id"], refundReversals([]refund{r}))

	case "charge.refunded":
		var c charge
		if err := ev.object(&c); err != nil {
			return outcome{}, err
		}
		// The account first: a refund before its payment parks as unknown_payment whatever the list.
		acct, order, err := resolve(ctx, tx, c.PaymentIntent.ID, c.Metadata["account_id"])
		if err != nil {
			return outcome{}, err
		}
		list, err := f.refunds(ctx, c)
		if err != nil {
			return outcome{}, err
		}
		return p.reverseOn(ctx, tx, acct, order, c.PaymentIntent.ID, refundReversals(list))

	case "charge.dispute.created", "charge.dispute.updated", "charge.dispute.closed",
		"charge.dispute.funds_withdrawn", "charge.dispute.funds_reinstated":
		var d dispute
		if err := ev.object(&d); err != nil {
			return outcome{}, err
		}
		var reversals []reversal
		if r, ok := disputeReversal(ev.Type, d); ok {
			reversals = append(reversals, r)
		}
		return p.reverseAll(ctx, tx, ev.paymentIntent(), d.Charge.Metadata["account_id"], reversals)

	default:
		return outcome{status: OutcomeIgnored}, nil
	}
}

// topup records the Checkout Session's order and moves it from pending to paid; only the transaction
// whose conditional UPDATE made that transition posts the credit, so a second completion event for the
// same session (another event id) credits nothing.
func (p *Processor) topup(ctx context.Context, tx db.Tx, ev event, s checkoutSession, prefetched map[string]refundLister) (outcome, error) {
	paymentIntent := s.PaymentIntent.ID
	if ev.Type == "checkout.session.completed" && s.PaymentStatus != "paid" {
		// An asynchronous payment: checkout.session.async_payment_succeeded will credit it.
		return outcome{status: OutcomeRecorded, paymentIntent: paymentIntent}, nil
	}
	if s.ID == "" || s.AmountTotal <= 0 {
		return outcome{status: OutcomeRecorded, paymentIntent: paymentIntent}, nil
	}
	if s.AmountTotal > db.MaxAmount {
		return outcome{}, park(ReasonAmountOutOfRange, paymentIntent)
	}
	accountID := s.accountID()
	// An order created through the API names its account; the session's metadata is a copy of it.
	order, err := db.TopupBySession(ctx, tx, s.ID)
	switch {
	case err == nil:
		accountID = order.AccountID
		// The order is the contract: a payment of another amount or currency is not what was sold.
		if order.Amount != s.AmountTotal || !strings.EqualFold(order.Currency, s.Currency) {
			return outcome{}, park(ReasonAmountMismatch, paymentIntent)
		}
	case !errors.Is(err, db.ErrNotFound):
		return outcome{}, err
	}
	if accountID == "" {
		return outcome{}, park(ReasonUnknownAccount, paymentIntent)
	}
	// A session without an order is credited 1:1, so only in the account's currency; an order's currency
	// was the account's (or any, for an account counted in credits) when it was made.
	currency := s.Currency
	if order.ID != "" {
		currency = ""
	}
	acct, err := account(ctx, tx, accountID, currency, paymentIntent)
	if err != nil {
		return outcome{}, err
	}
	if s.Customer.ID != "" {
		// A session that saves the card (save_payment_method): its customer is the account's.
		if err := db.SetStripeCustomer(ctx, tx, acct.ID, s.Customer.ID); err != nil {
			return outcome{}, err
		}
	}
	out := outcome{status: OutcomeApplied, paymentIntent: paymentIntent}
	// The session's order moves from pending to paid, or is recorded paid if the session has none.
	order, paid, err := db.PayTopup(ctx, tx, db.Topup{
		ID: s.ID, AccountID: acct.ID, SessionID: s.ID, PaymentIntent: paymentIntent, Amount: s.AmountTotal,
		Currency: s.Currency,
	}, ev.ID)
	if errors.Is(err, db.ErrDedupeConflict) {
		// The payment already paid another order (topups_payment_intent_key).
		return outcome{}, &parked{reason: ReasonDedupeConflict, paymentIntent: paymentIntent, cause: err}
	}
	if err != nil {
		return outcome{}, err
	}
	if !paid {
		// Already paid by an earlier event, or expired: read after the UPDATE, which waited for a
		// concurrent transition to commit.
		order, err := db.TopupBySession(ctx, tx, s.ID)
		if err != nil {
			return outcome{}, err
		}
		if order.Status == db.TopupExpired {
			return outcome{}, park(ReasonOrderExpired, paymentIntent)
		}
		return out, nil
	}
	if err := p.creditOrder(ctx, tx, &out, ev, order, "Stripe Checkout "+s.ID, prefetched); err != nil {
		return outcome{}, err
	}
	return out, nil
}

// creditOrder posts the credit of an order that this transaction just moved from pending to paid (a
// Checkout Session's or a recharge's), keyed stripe:{event_id}, then re-applies the events parked
// waiting for its payment. Every paid order is credited here and nowhere else.
func (p *Processor) creditOrder(ctx context.Context, tx db.Tx, out *outcome, ev event, order db.Topup, description string, prefetched map[string]refundLister) error {
	var err error
	out.credited, err = p.post(ctx, tx, out, db.Posting{
		AccountID: order.AccountID, Kind: db.KindTopup, Amount: order.CreditsFor(order.Amount),
		Description: description, DedupeKey: "stripe:" + ev.ID, PaymentIntent: order.PaymentIntent,
		// The order is the contract: its credits, bought at its price.
		Cost: order.Price(),
	})
	if err != nil {
		return err
	}
	if order.PaymentIntent != "" {
		return p.unpark(ctx, tx, out, order.PaymentIntent, prefetched)
	}
	return nil
}

// expire moves the session's pending order to expired (conditional, like the payment): applied when it
// did, recorded when the session has no order or it was already paid or expired. No money moves.
func expire(ctx context.Context, tx db.Tx, s checkoutSession) (outcome, error) {
	out := outcome{status: OutcomeRecorded, paymentIntent: s.PaymentIntent.ID}
	if s.ID == "" {
		return out, nil
	}
	expired, err := db.ExpireTopup(ctx, tx, s.ID)
	if err != nil {
		return outcome{}, err
	}
	if expired {
		out.status = OutcomeApplied
	}
	return out, nil
}

// unpark re-applies, in the top-up's transaction, the events that were parked waiting for this payment,
// so that they commit with the credit they were waiting for. A charge.refunded among them needs its
// refund list from Stripe: fetched before the transaction began (prefetched), or, when that was not possible
// (Stripe unavailable, or the event parked after that look), left to a job enqueued here and run after
// commit: the credit never waits on Stripe.
func (p *Processor) unpark(ctx context.Context, tx db.Tx, out *outcome, paymentIntent string, prefetched map[string]refundLister) error {
	waiting, err := db.ParkedEventsForPayment(ctx, tx, paymentIntent)
	if err != nil {
		return err
	}
	for _, row := range waiting {
		ev, err := parseEvent(row.Payload)
		if err != nil {
			return err
		}
		// Parked under this payment, which a charge-only refund or dispute found through Stripe.
		ev.chargePaymentIntent = paymentIntent
		refunds, ok := prefetched[row.ID]
		if !ok && ev.needsRefundList() {
			if p.Reapply == nil {
				p.Log.WarnContext(ctx, "parked event left for replay: no job queue to re-apply it", "event", row.ID)
				continue
			}
			if err := p.Reapply.enqueue(ctx, tx, row.ID); err != nil {
				return err
			}
			out.deferred = append(out.deferred, row.ID)
			continue
		}
		if !ok {
			// Answers from the payload alone: needsRefundList is false.
			refunds = p.refundsOf
		}
		reapplied, err := p.apply(ctx, tx, ev, fetched{refunds: refunds})
		if err != nil {
			return fmt.Errorf("re-apply parked %s: %w", row.ID, err)
		}
		if err := setOutcome(ctx, tx, row.ID, reapplied); err != nil {
			return err
		}
		out.reversed += reapplied.reversed
		out.restored += reapplied.restored
		out.posted = append(out.posted, reapplied.posted...)
		out.unparked = append(out.unparked, row.ID)
	}
	return nil
}

// reversal is one refund or dispute: the money taken back and, when it was undone (the refund failed or
// was canceled, the dispute was won), the money given back, each under its own key.
type reversal struct {
	kind, key               string
	restoreKind, restoreKey string
	amount                  int64
	currency                string
	undone                  bool
	description             string
}

// The keys of the reversals and restores of refunds and disputes (SPEC §3): each names the thing that
// happened, so the webhook posts it once and the drift pass (internal/reconcile) finds it.
const (
	refundKeyPrefix        = "stripe:refund:"
	refundRestoreKeyPrefix = "stripe:refund-failed:"
	disputeKeyPrefix       = "stripe:dispute:"
	disputeWonKeyPrefix    = "stripe:dispute-won:"
)

// RefundKey is the key of a refund's reversal.
func RefundKey(id string) string { return refundKeyPrefix + id }

// RefundRestoreKey is the key of a refund's restore: the refund failed or was canceled.
func RefundRestoreKey(id string) string { return refundRestoreKeyPrefix + id }

// DisputeKey is the key of a chargeback's reversal.
func DisputeKey(id string) string { return disputeKeyPrefix + id }

// DisputeWonKey is the key of a dispute's restore: the dispute was won.
func DisputeWonKey(id string) string { return disputeWonKeyPrefix + id }

// RestoredRefund returns the refund a RefundRestoreKey names; ok is false for another key.
func RestoredRefund(key string) (id string, ok bool) {
	return strings.CutPrefix(key, refundRestoreKeyPrefix)
}

// RestoredDispute returns the dispute a DisputeWonKey names; ok is false for another key.
func RestoredDispute(key string) (id string, ok bool) {
	return strings.CutPrefix(key, disputeWonKeyPrefix)
}

// RefundMoves says what a refund in status has moved: pending, requires_action and succeeded refunds
// take money back; failed and canceled ones take it back and give it back (so a late "created" event
// finds both keys taken). Any other status moves nothing yet.
func RefundMoves(status string) (reversed, restored bool) {
	switch status {
	case "pending", "requires_action", "succeeded":
		return true, false
	case "failed", "canceled":
		return true, true
	}
	return false, false
}

// DisputeMoves says what a dispute's state alone has moved: a chargeback withdraws funds while
// needs_response, under_review or lost, and gives them back when won; an inquiry (case_type inquiry, or
// a warning_* status) moves nothing, nor does any other status.
func DisputeMoves(status, caseType string) (withdrawn, reinstated bool) {
	if isInquiry(status, caseType) {
		return false, false
	}
	switch status {
	case "needs_response", "under_review", "lost":
		return true, false
	case "won":
		return true, true
	}
	return false, false
}

// refundReversals: the reversals (and restores) RefundMoves gives each refund.
func refundReversals(refunds []refund) []reversal {
	var out []reversal
	for _, r := range refunds {
		reversed, restored := RefundMoves(r.Status)
		if !reversed || r.ID == "" || r.Amount <= 0 {
			continue
		}
		out = append(out, reversal{
			kind: db.KindRefund, key: RefundKey(r.ID),
			restoreKind: db.KindRefundRestore, restoreKey: RefundRestoreKey(r.ID),
			amount: r.Amount, currency: r.Currency, undone: restored, description: "Stripe refund " + r.ID,
		})
	}
	return out
}

// disputeReversal: what DisputeMoves gives the dispute's state, except that funds_withdrawn and
// funds_reinstated say themselves what moved (Stripe sends them for an escalated inquiry too), and
// that a chargeback's creation withdraws its funds whatever its status says.
func disputeReversal(eventType string, d dispute) (reversal, bool) {
	r := reversal{
		kind: db.KindDispute, key: DisputeKey(d.ID),
		restoreKind: db.KindDisputeWon, restoreKey: DisputeWonKey(d.ID),
		amount: d.Amount, currency: d.Currency, description: "Stripe dispute " + d.ID,
	}
	if d.ID == "" || d.Amount <= 0 {
		return reversal{}, false
	}
	switch {
	case eventType == "charge.dispute.funds_reinstated":
		r.undone = true
	case eventType == "charge.dispute.funds_withdrawn":
	case d.isInquiry():
		return reversal{}, false
	default:
		withdrawn, reinstated := DisputeMoves(d.Status, d.PaymentMethodDetails.Card.CaseType)
		if !withdrawn && eventType != "charge.dispute.created" {
			return reversal{}, false
		}
		r.undone = reinstated
	}
	return r, true
}

// reverseAll posts the reversals of one payment on its account. An event with nothing to reverse is
// recorded without looking for the account.
func (p *Processor) reverseAll(ctx context.Context, tx db.Tx, paymentIntent, chargeAccount string, reversals []reversal) (outcome, error) {
	if len(reversals) == 0 {
		return outcome{status: OutcomeRecorded, paymentIntent: paymentIntent}, nil
	}
	acct, order, err := resolve(ctx, tx, paymentIntent, chargeAccount)
	if err != nil {
		return outcome{}, err
	}
	return p.reverseOn(ctx, tx, acct, order, paymentIntent, reversals)
}

// reverseOn posts the reversals of one payment on acct, each under its own key. A payment of an order
// (order not nil) is reversed in the order's currency and credits: a reversal of money takes back the
// credits that money bought (all of them for the whole price).
func (p *Processor) reverseOn(ctx context.Context, tx db.Tx, acct db.Account, order *db.Topup, paymentIntent string, reversals []reversal) (outcome, error) {
	if len(reversals) == 0 {
		return outcome{status: OutcomeRecorded, paymentIntent: paymentIntent}, nil
	}
	out := outcome{status: OutcomeApplied, paymentIntent: paymentIntent}
	currency, credits := acct.Currency, func(money int64) int64 { return money }
	if order != nil {
		currency, credits = order.Currency, order.CreditsFor
	}
	for _, r := range reversals {
		if !strings.EqualFold(r.currency, currency) {
			return outcome{}, park(ReasonCurrencyMismatch, paymentIntent)
		}
		if r.amount > db.MaxAmount {
			return outcome{}, park(ReasonAmountOutOfRange, paymentIntent)
		}
		r.amount = credits(r.amount)
		if r.amount <= 0 || r.amount > db.MaxAmount {
			return outcome{}, park(ReasonAmountOutOfRange, paymentIntent)
		}
		posted, err := p.post(ctx, tx, &out, db.Posting{
			AccountID: acct.ID, Kind: r.kind, Amount: -r.amount, Description: r.description,
			DedupeKey: r.key, PaymentIntent: paymentIntent,
		})
		if err != nil {
			return outcome{}, err
		}
		if posted {
			out.reversed++
		}
		if !r.undone {
			continue
		}
		posted, err = p.post(ctx, tx, &out, db.Posting{
			AccountID: acct.ID, Kind: r.restoreKind, Amount: r.amount, Description: r.description + " undone",
			DedupeKey: r.restoreKey, PaymentIntent: paymentIntent, Reverses: r.key,
		})
		if err != nil {
			return outcome{}, err
		}
		if posted {
			out.restored++
		}
	}
	return out, nil
}

// resolve finds the account a refund or dispute belongs to, and the paid order of its payment when
// there is one: through that order (refund and dispute metadata is empty in real payloads), else the
// charge's metadata.account_id.
// The caller (apply) holds the payment's lock, so the order read here cannot be committed unseen.
func resolve(ctx context.Context, tx db.Tx, paymentIntent, chargeAccount string) (db.Account, *db.Topup, error) {
	accountID := chargeAccount
	var paid *db.Topup
	if paymentIntent != "" {
		order, err := db.TopupByPaymentIntent(ctx, tx, paymentIntent)
		switch {
		case err == nil:
			accountID, paid = order.AccountID, &order
		case !errors.Is(err, db.ErrNotFound):
			return db.Account{}, nil, err
		}
	}
	if accountID == "" {
		return db.Account{}, nil, park(ReasonUnknownPayment, paymentIntent)
	}
	acct, err := account(ctx, tx, accountID, "", paymentIntent)
	return acct, paid, err
}

// account reads the account, parking unknown_account when it does not exist and currency_mismatch
// when currency (if given) is not its currency: money is never converted.
func account(ctx context.Context, tx db.Tx, id, currency, paymentIntent string) (db.Account, error) {
	acct, err := db.GetAccount(ctx, tx, id)
	if errors.Is(err, db.ErrNotFound) {
		return db.Account{}, park(ReasonUnknownAccount, paymentIntent)
	}
	if err != nil {
		return db.Account{}, err
	}
	if currency != "" && !strings.EqualFold(currency, acct.Currency) {
		return db.Account{}, park(ReasonCurrencyMismatch, paymentIntent)
	}
	return acct, nil
}

// post posts one entry and notes its key when it was new. A key already posted with other parameters
// parks the event as dedupe_conflict: a bug or an attack, never a replay. A balance that would leave
// a bigint parks it as amount_out_of_range (the failed statement is rolled back with the effects'
// savepoint).
func (p *Processor) post(ctx context.Context, tx db.Tx, out *outcome, posting db.Posting) (bool, error) {
	posted, err := p.Ledger.Post(ctx, tx, posting)
	if errors.Is(err, db.ErrDedupeConflict) {
		return false, &parked{reason: ReasonDedupeConflict, paymentIntent: posting.PaymentIntent, cause: err}
	}
	if errors.Is(err, db.ErrOutOfRange) {
		return false, &parked{reason: ReasonAmountOutOfRange, paymentIntent: posting.PaymentIntent, cause: err}
	}
	if err != nil {
		return false, err
	}
	if posted.New {
		out.posted = append(out.posted, posting.DedupeKey)
	}
	return posted.New, nil
}
