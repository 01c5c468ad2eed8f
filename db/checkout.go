package db

import (
	"context"
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
	// Distributed: the database is a Citus cluster, where PayCheckout does not run (its statements
	// read across shards) and only Recorded is read: every event takes the general path.
	Distributed bool
}

// ReadCheckoutState reads, in one statement, what a completion of session needs to know before its
// transaction: see CheckoutState.
func ReadCheckoutState(ctx context.Context, q Conn, eventID, sessionID, metadataAccountID, paymentIntent string) (CheckoutState, error) {
	if citus, err := onCitus(ctx, q); err != nil || citus {
		if err != nil {
			return CheckoutState{}, err
		}
		recorded, err := EventRecorded(ctx, q, eventID)
		return CheckoutState{Recorded: recorded, Distributed: true}, err
	}
	r, err := dbsqlc.New(q).StripeEventsCheckoutState(ctx, dbsqlc.StripeEventsCheckoutStateParams{
		EventID: eventID, SessionID: sessionID, MetadataAccountID: metadataAccountID, PaymentIntent: paymentIntent,
	})
	if err != nil {
		return CheckoutState{}, fmt.Errorf("read state of session %s: %w", sessionID, MapError(err))
	}
	state := CheckoutState{Recorded: r.Recorded, ParkedWaiting: r.ParkedWaiting}
	if r.OrderID != nil {
		state.Order = &Topup{
			ID: *r.OrderID, AccountID: deref(r.OrderAccountID), SessionID: sessionID, Amount: deref(r.OrderAmount),
			Currency: deref(r.OrderCurrency), Status: deref(r.OrderStatus),
		}
	}
	if r.AccountID != nil {
		state.Account = &Account{ID: *r.AccountID, Currency: deref(r.AccountCurrency)}
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
	// Credit is the order's credit (Kind, Description, DedupeKey); account, amount and payment are the
	// order's.
	Credit Posting
}

// credit is the payment's credit as posted: the entry inserted with id, createdAt, seq and balanceAfter.
func (p CheckoutPayment) credit(id int64, createdAt time.Time, seq, balanceAfter int64) Posted {
	return Posted{Posted: true, Balance: balanceAfter, Entry: Entry{
		ID: id, AccountID: p.Order.AccountID, Kind: p.Credit.Kind, Amount: p.Order.Amount, Description: p.Credit.Description,
		DedupeKey: p.Credit.DedupeKey, PaymentIntent: p.Order.PaymentIntent, CreatedAt: createdAt, Seq: seq,
		BalanceAfter: balanceAfter,
	}}
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
// path runs them: the event (StripeEventsInsert), the payment's lock (StripeEventsLockPayment), the
// order made paid with whether events wait for the payment (TopupsPaySession, after the lock, so that a
// refund parked meanwhile is seen) and the credit (LedgerInsert). It commits
// only when each did exactly what the happy path expects (the event is new, this transaction made the
// order paid and posted its credit, nothing waits), so it never records an outcome the general path
// would not; otherwise it rolls back and writes nothing. No savepoint is needed: nothing is kept from
// a transaction that went another way. Plain PostgreSQL only: on Citus it is always CheckoutNotPaid.
func (l Ledger) PayCheckout(ctx context.Context, pool *Pool, p CheckoutPayment) (CheckoutPaid, Posted, error) {
	return l.payCheckout(ctx, pool, p, 0)
}

// errLockWait: a lock was not granted within payCheckout's lockTimeout; nothing was written.
var errLockWait = errors.New("a lock was waited for longer than the transaction's lock timeout")

// payCheckout is PayCheckout whose lock waits, with a positive lockTimeout, end there: then it writes
// nothing and returns errLockWait.
func (l Ledger) payCheckout(ctx context.Context, pool *Pool, p CheckoutPayment, lockTimeout time.Duration) (CheckoutPaid, Posted, error) {
	if citus, err := onCitus(ctx, pool); err != nil || citus {
		return CheckoutNotPaid, Posted{}, err
	}
	var (
		order dbsqlc.TopupsPaySessionRow
		entry dbsqlc.LedgerInsertRow
		o, e  = p.Order, p.Event
	)
	steps := []step{
		func(q *dbsqlc.Queries) (err error) {
			_, err = q.StripeEventsInsert(ctx, eventInsert(e))
			return err
		},
		func(q *dbsqlc.Queries) error { return q.StripeEventsLockPayment(ctx, o.PaymentIntent) },
		func(q *dbsqlc.Queries) (err error) {
			order, err = q.TopupsPaySession(ctx, dbsqlc.TopupsPaySessionParams{
				PaymentIntent: o.PaymentIntent, PaidEventID: e.ID, SessionID: o.SessionID, Amount: o.Amount,
				Currency: o.Currency, ID: o.ID, AccountID: o.AccountID,
			})
			return err
		},
		func(q *dbsqlc.Queries) (err error) {
			entry, err = q.LedgerInsert(ctx, dbsqlc.LedgerInsertParams{
				AccountID: o.AccountID, Kind: p.Credit.Kind, Amount: o.Amount, Description: p.Credit.Description,
				DedupeKey: nullable(p.Credit.DedupeKey), PaymentIntent: nullable(o.PaymentIntent),
			})
			return err
		},
	}
	tx, errs, err := beginPipelined(ctx, pool, lockTimeout, steps)
	if err != nil {
		return CheckoutNotPaid, Posted{}, err
	}
	if isNoRows(errs[0]) {
		return CheckoutDuplicate, Posted{}, endPipelined(ctx, tx, false)
	}
	if err := firstError(errs); err != nil {
		_ = endPipelined(ctx, tx, false)
		if isNoRows(err) || refusedByData(err) {
			return CheckoutNotPaid, Posted{}, nil
		}
		if lockTimeout > 0 && lockNotAvailable(err) {
			return CheckoutNotPaid, Posted{}, errLockWait
		}
		// The database failed, not the payment (a connection lost, a deadlock): the general path would
		// fail the same way, and the caller answers it as such.
		return CheckoutNotPaid, Posted{}, fmt.Errorf("pay session %s: %w", o.SessionID, MapError(err))
	}
	if order.ParkedWaiting || order.AccountID != o.AccountID {
		return CheckoutNotPaid, Posted{}, endPipelined(ctx, tx, false)
	}
	posted := p.credit(entry.ID, entry.CreatedAt, entry.Seq, entry.BalanceAfter)
	if err := l.Posted(ctx, tx, []Posted{posted}); err != nil {
		_ = endPipelined(ctx, tx, false)
		return CheckoutNotPaid, Posted{}, err
	}
	if err := endPipelined(ctx, tx, true); err != nil {
		return CheckoutNotPaid, Posted{}, err
	}
	return CheckoutCredited, posted, nil
}
