package db

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// CheckoutState is what a Checkout Session's completion reads before its transaction
// (StripeEventsCheckoutState). It only decides which path the event takes: PayCheckout's own
// statements hold the money's guarantees again, whatever changed since.
type CheckoutState struct {
	// Recorded: the event was recorded already, and a delivery of it is a duplicate.
	Recorded bool
	// Order is the session's order (ID, AccountID, Amount, Currency, Status); nil when it has none.
	Order *Topup
	// Account is the account a credit would go to (ID, Currency): the order's, else the metadata's.
	// Nil when that account does not exist, or no account was named.
	Account *Account
	// ParkedWaiting: events are parked waiting for the payment.
	ParkedWaiting bool
	// GeneralPath: the happy path does not run here (LedgerConfig.GeneralPathOnly) and only Recorded
	// was read: every event takes the general path.
	GeneralPath bool
}

// ReadCheckoutState reads, in one statement, what a completion of session needs to know before its
// transaction: see CheckoutState. With GeneralPathOnly it reads only whether the event is recorded.
func (l *Ledger) ReadCheckoutState(ctx context.Context, eventID, sessionID, metadataAccountID, paymentIntent string) (CheckoutState, error) {
	return l.checkoutState(ctx, eventID, sessionID, metadataAccountID, paymentIntent)
}

// recordedOnly is ReadCheckoutState where the happy path does not run (GeneralPathOnly).
func (l *Ledger) recordedOnly(ctx context.Context, eventID, _, _, _ string) (CheckoutState, error) {
	recorded, err := EventRecorded(ctx, l.pool, eventID)
	return CheckoutState{Recorded: recorded, GeneralPath: true}, err
}

// readCheckoutState is ReadCheckoutState where the happy path runs.
func (l *Ledger) readCheckoutState(ctx context.Context, eventID, sessionID, metadataAccountID, paymentIntent string) (CheckoutState, error) {
	raw, err := dbsqlc.New(l.pool).StripeEventsCheckoutState(ctx, dbsqlc.StripeEventsCheckoutStateParams{
		EventID: eventID, SessionID: sessionID, MetadataAccountID: metadataAccountID, PaymentIntent: paymentIntent,
	})
	if err != nil {
		return CheckoutState{}, fmt.Errorf("read state of session %s: %w", sessionID, MapError(err))
	}
	// checkout_state's object (sql/migrations/000034_checkout_state.up.sql).
	var r struct {
		Recorded bool `json:"recorded"`
		Order    *struct {
			ID        string `json:"id"`
			AccountID string `json:"account_id"`
			Amount    int64  `json:"amount"`
			Currency  string `json:"currency"`
			Status    string `json:"status"`
			Credits   int64  `json:"credits"`
		} `json:"order"`
		Account *struct {
			ID       string `json:"id"`
			Currency string `json:"currency"`
		} `json:"account"`
		ParkedWaiting bool `json:"parked_waiting"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return CheckoutState{}, fmt.Errorf("read state of session %s: %w", sessionID, err)
	}
	state := CheckoutState{Recorded: r.Recorded, ParkedWaiting: r.ParkedWaiting}
	if o := r.Order; o != nil {
		state.Order = &Topup{
			ID: o.ID, AccountID: o.AccountID, SessionID: sessionID, Amount: o.Amount,
			Currency: o.Currency, Status: o.Status, Credits: o.Credits,
		}
	}
	if a := r.Account; a != nil {
		state.Account = &Account{ID: a.ID, Currency: a.Currency}
	}
	return state, nil
}

// CheckoutPayment is a Checkout Session's paid completion, as the webhook's first delivery records it.
type CheckoutPayment struct {
	// Event is recorded as it is given.
	Event Event
	// Order is the session's order: made paid if it is pending, recorded paid if the session has
	// none (ID, AccountID, SessionID, PaymentIntent, Amount, and the session's Currency, which the
	// order, or else the account, must have).
	Order Topup
	// Credit is the order's credit (Kind, Description, DedupeKey); account, amount (the order's
	// Credits), payment and lot cost (its price) are the order's.
	Credit Posting
}

// credit is the order's credit, as it is posted.
func (p CheckoutPayment) credit() Posting {
	c := p.Credit
	c.AccountID, c.Amount, c.PaymentIntent = p.Order.AccountID, p.Order.creditsOrAmount(), p.Order.PaymentIntent
	c.Cost = p.Order.Price()
	return c
}

// payArgs are TopupsPay's arguments for the payments, in order.
func payArgs(payments ...CheckoutPayment) dbsqlc.TopupsPayParams {
	var arg dbsqlc.TopupsPayParams
	for _, p := range payments {
		o := p.Order
		arg.IDs = append(arg.IDs, o.ID)
		arg.AccountIDs = append(arg.AccountIDs, o.AccountID)
		arg.SessionIDs = append(arg.SessionIDs, o.SessionID)
		arg.PaymentIntents = append(arg.PaymentIntents, o.PaymentIntent)
		arg.PaidEventIDs = append(arg.PaidEventIDs, p.Event.ID)
		arg.Amounts = append(arg.Amounts, o.Amount)
		arg.Currencies = append(arg.Currencies, o.Currency)
	}
	return arg
}

// CheckoutPaid says what PayCheckout did.
type CheckoutPaid int

const (
	// CheckoutNotPaid: nothing was written (the order was paid, expired or recorded meanwhile, the
	// payment or key was taken, events wait for the payment, or a statement failed): the caller
	// applies the event by the general path, which finds out why.
	CheckoutNotPaid CheckoutPaid = iota
	// CheckoutDuplicate: the event was recorded meanwhile by another delivery; nothing was written.
	CheckoutDuplicate
	// CheckoutCredited: the event, the paid order and the credit were committed together.
	CheckoutCredited
)

// PayCheckout records a paid Checkout Session's first delivery in two round trips: BEGIN with every
// statement in one batch, then COMMIT (and OnPosted's work in between, if any). In order, as the general
// path runs them: the event (StripeEventsInsert), the payment's lock (StripeEventsLockPayment), the order
// made paid (TopupsPay), whether events wait for the payment (StripeEventsParkedWaiting, after the lock,
// so that a refund parked meanwhile is seen) and the credit (LedgerAppend). It commits only when each did exactly what the happy
// path expects (the event is new, this transaction made the order paid and posted its credit, nothing
// waits), so it never records an outcome the general path would not; otherwise it rolls back and writes
// nothing. No savepoint is needed: nothing is kept from a transaction that went another way. With
// GroupCheckouts, concurrent deliveries share one transaction (commitCheckouts), each getting the answer
// its own would have given. With GeneralPathOnly it is always CheckoutNotPaid: the general path applies
// the event.
func (l *Ledger) PayCheckout(ctx context.Context, p CheckoutPayment) (CheckoutPaid, Posted, error) {
	return l.payCheckout(ctx, p)
}

// errLockWait: a lock was not granted within payCheckoutAlone's lockTimeout; nothing was written.
var errLockWait = errors.New("a lock was waited for longer than the transaction's lock timeout")

// generalPathOnly is PayCheckout where the happy path does not run (GeneralPathOnly).
func (l *Ledger) generalPathOnly(context.Context, CheckoutPayment) (CheckoutPaid, Posted, error) {
	return CheckoutNotPaid, Posted{}, nil
}

// payCheckoutOwn is PayCheckout in a transaction of its own.
func (l *Ledger) payCheckoutOwn(ctx context.Context, p CheckoutPayment) (CheckoutPaid, Posted, error) {
	return l.payCheckoutAlone(ctx, p, 0)
}

// payCheckoutAlone is PayCheckout in its own transaction, whose lock waits, with a positive lockTimeout,
// end there: then it writes nothing and returns errLockWait.
func (l *Ledger) payCheckoutAlone(ctx context.Context, p CheckoutPayment, lockTimeout time.Duration) (CheckoutPaid, Posted, error) {
	var (
		orders  []dbsqlc.Topup
		waiting []string
		entries []dbsqlc.LedgerAppendRow
		o, e    = p.Order, p.Event
	)
	credit := l.appendArgs([]Posting{p.credit()}, nil)
	steps := []step{
		func(q *dbsqlc.Queries) (err error) {
			_, err = q.StripeEventsInsert(ctx, eventInsert(e))
			return err
		},
		func(q *dbsqlc.Queries) error { return q.StripeEventsLockPayment(ctx, o.PaymentIntent) },
		func(q *dbsqlc.Queries) (err error) { orders, err = q.TopupsPay(ctx, payArgs(p)); return err },
		func(q *dbsqlc.Queries) (err error) {
			waiting, err = q.StripeEventsParkedWaiting(ctx, []string{o.PaymentIntent})
			return err
		},
		func(q *dbsqlc.Queries) (err error) { entries, err = q.LedgerAppend(ctx, credit); return err },
	}
	tx, errs, err := beginPipelined(ctx, l.pool, lockTimeout, steps)
	if err != nil {
		return CheckoutNotPaid, Posted{}, err
	}
	if isNoRows(errs[0]) {
		return CheckoutDuplicate, Posted{}, endPipelined(ctx, tx, false)
	}
	if err := firstError(errs); err != nil {
		_ = endPipelined(ctx, tx, false)
		if refusedByData(err) {
			return CheckoutNotPaid, Posted{}, nil
		}
		if lockTimeout > 0 && lockNotAvailable(err) {
			return CheckoutNotPaid, Posted{}, errLockWait
		}
		// The database failed, not the payment (a connection lost, a deadlock): the general path would
		// fail the same way, and the caller answers it as such.
		return CheckoutNotPaid, Posted{}, fmt.Errorf("pay session %s: %w", o.SessionID, MapError(err))
	}
	posted, byRow := appended(entries, 1)
	if len(orders) != 1 || len(waiting) > 0 || orders[0].AccountID != o.AccountID || byRow[0] == nil {
		return CheckoutNotPaid, Posted{}, endPipelined(ctx, tx, false)
	}
	if err := l.inserted(ctx, tx, posted); err != nil {
		_ = endPipelined(ctx, tx, false)
		return CheckoutNotPaid, Posted{}, err
	}
	if err := endPipelined(ctx, tx, true); err != nil {
		return CheckoutNotPaid, Posted{}, err
	}
	return CheckoutCredited, Posted{Entry: *byRow[0], New: true}, nil
}
