package db

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// Topup is one top-up order (a topups row). Empty strings mean none.
type Topup struct {
	ID            string
	AccountID     string
	SessionID     string
	PaymentIntent string
	Amount        int64 // the price, in Currency's minor units: what the payment must be
	Credits       int64 // what the order buys (0 when inserting: Amount)
	Currency      string
	Status        string
	CheckoutURL   string
	PaidEventID   string
	CreatedAt     time.Time
	PaidAt        *time.Time // nil: not paid
	// IdempotencyKey and RequestFingerprint are the API request's Idempotency-Key and a digest of its
	// body, when the caller sent a key.
	IdempotencyKey     string
	RequestFingerprint string
}

// Order statuses, as topups_status_check knows them.
const (
	TopupPending = "pending"
	TopupPaid    = "paid"
	TopupExpired = "expired"
)

func topupFromRow(r dbsqlc.Topup) Topup {
	return Topup{
		ID: r.ID, AccountID: r.AccountID, SessionID: deref(r.SessionID), PaymentIntent: deref(r.PaymentIntent),
		Amount: r.Amount, Credits: r.Credits, Currency: r.Currency, Status: r.Status, CheckoutURL: deref(r.CheckoutURL),
		PaidEventID: deref(r.PaidEventID), CreatedAt: r.CreatedAt, PaidAt: r.PaidAt,
		IdempotencyKey: deref(r.IdempotencyKey), RequestFingerprint: deref(r.RequestFingerprint),
	}
}

// creditsOrAmount is what the order buys: Credits, or Amount when none was named (1:1).
func (t Topup) creditsOrAmount() int64 {
	if t.Credits == 0 {
		return t.Amount
	}
	return t.Credits
}

// Price is what the order costs, the cost of the lot its credit makes.
func (t Topup) Price() *Cost {
	return &Cost{Amount: t.Amount, Currency: strings.ToLower(t.Currency)}
}

// CreditsFor is the credits money (of the order's currency) bought at the order's price: all its
// credits for the whole price, in proportion (rounded half up) for a part of it.
func (t Topup) CreditsFor(money int64) int64 {
	credits := t.creditsOrAmount()
	if money == t.Amount || credits == t.Amount || t.Amount <= 0 {
		if money == t.Amount {
			return credits
		}
		return money
	}
	n := new(big.Int).Mul(big.NewInt(money), big.NewInt(credits))
	n.Mul(n, big.NewInt(2)).Add(n, big.NewInt(t.Amount))
	n.Quo(n, big.NewInt(2*t.Amount))
	if !n.IsInt64() {
		return math.MaxInt64
	}
	return n.Int64()
}

// topupOrNotFound answers a query for one order: ErrNotFound when there is none.
func topupOrNotFound(r dbsqlc.Topup, err error, what string) (Topup, error) {
	if isNoRows(err) {
		return Topup{}, fmt.Errorf("top-up of %s: %w", what, ErrNotFound)
	}
	if err != nil {
		return Topup{}, fmt.Errorf("read top-up of %s: %w", what, MapError(err))
	}
	return topupFromRow(r), nil
}

// InsertPendingTopup records a new pending order (t.ID, AccountID, Amount, Currency, and
// IdempotencyKey with RequestFingerprint when the caller sent a key) before its Checkout Session is
// created. When the account already has an order under that key (topups_idempotency_key), that order is
// returned with created false: the same fingerprint is a retry of it, another one
// ErrDedupeConflict. ErrAccountNotFound when the account does not exist (topups_account_fk). A retry
// makes the request a replay (PendingAudit), unless it goes on to attach the order's session.
func InsertPendingTopup(ctx context.Context, q Conn, t Topup) (order Topup, created bool, err error) {
	queries := dbsqlc.New(q)
	r, err := queries.TopupsInsertPending(ctx, dbsqlc.TopupsInsertPendingParams{
		ID: t.ID, AccountID: t.AccountID, Amount: t.Amount, Credits: t.creditsOrAmount(), Currency: t.Currency,
		IdempotencyKey: nullable(t.IdempotencyKey), RequestFingerprint: nullable(t.RequestFingerprint),
	})
	if err == nil {
		return topupFromRow(r), true, nil
	}
	if !isNoRows(err) {
		return Topup{}, false, fmt.Errorf("insert top-up for %s: %w", t.AccountID, MapError(err))
	}
	// The key was taken, by a committed order: ON CONFLICT waited for any insert in flight.
	r, err = queries.TopupsGetByIdempotencyKey(ctx, dbsqlc.TopupsGetByIdempotencyKeyParams{
		AccountID: t.AccountID, IdempotencyKey: t.IdempotencyKey,
	})
	order, err = topupOrNotFound(r, err, "Idempotency-Key "+t.IdempotencyKey)
	if err != nil {
		return Topup{}, false, err
	}
	if order.RequestFingerprint != t.RequestFingerprint {
		return Topup{}, false, fmt.Errorf("%w: Idempotency-Key %q was used for another top-up request", ErrDedupeConflict, t.IdempotencyKey)
	}
	PendingAuditOf(ctx).markReplay()
	return order, false, nil
}

// SetTopupSession attaches the Checkout Session created for a pending order; attaching the same
// session again is a no-op. ErrNotFound when the order does not exist or already has another session.
// The request's record (PendingAudit) commits with the session, which completes the order the request
// asked for.
func SetTopupSession(ctx context.Context, b Beginner, id, sessionID, checkoutURL string) (Topup, error) {
	var order Topup
	err := InAuditedTx(ctx, b, func(tx Tx) (bool, error) {
		r, err := dbsqlc.New(tx).TopupsSetSession(ctx, dbsqlc.TopupsSetSessionParams{
			ID: id, SessionID: sessionID, CheckoutURL: &checkoutURL,
		})
		order, err = topupOrNotFound(r, err, "order "+id+" without a session")
		return err == nil, err
	})
	return order, err
}

// GetTopup returns the order, or ErrNotFound.
func GetTopup(ctx context.Context, q Conn, id string) (Topup, error) {
	r, err := dbsqlc.New(q).TopupsGet(ctx, id)
	return topupOrNotFound(r, err, "id "+id)
}

// TopupBySession returns the order of a Checkout Session, or ErrNotFound when it has none.
func TopupBySession(ctx context.Context, q Conn, sessionID string) (Topup, error) {
	r, err := dbsqlc.New(q).TopupsGetBySession(ctx, &sessionID)
	return topupOrNotFound(r, err, "session "+sessionID)
}

// TopupByPaymentIntent returns the paid order of a payment: how refunds and disputes, whose own
// metadata is empty, find their account. ErrNotFound when the payment is not (yet) recorded.
func TopupByPaymentIntent(ctx context.Context, q Conn, paymentIntent string) (Topup, error) {
	r, err := dbsqlc.New(q).TopupsGetByPaymentIntent(ctx, paymentIntent)
	return topupOrNotFound(r, err, "payment "+paymentIntent)
}

// PayTopup moves an order from pending to paid, at most once (TopupsPay, the one statement that pays
// orders): paid is true only for the call that made the transition, and only that call may post the
// credit. The order is named by o.SessionID, or by o.ID when it has no session (a recharge's), under
// o.AccountID, and must hold o.Amount in o.Currency. A session without an order yet has its order (o.ID)
// recorded already paid, when o.AccountID has the session's currency. paid is false when the order was
// paid or expired before, holds another amount or currency, or the account is missing or of another
// currency. ErrDedupeConflict when the payment already paid another order (topups_payment_intent_key).
func PayTopup(ctx context.Context, q Conn, o Topup, eventID string) (order Topup, paid bool, err error) {
	rows, err := dbsqlc.New(q).TopupsPay(ctx, payArgs(CheckoutPayment{Event: Event{ID: eventID}, Order: o}))
	if err != nil {
		return Topup{}, false, fmt.Errorf("pay order %s: %w", o.ID, MapError(err))
	}
	if len(rows) == 0 {
		return Topup{}, false, nil
	}
	return topupFromRow(rows[0]), true, nil
}

// ExpireTopup moves the session's order from pending to expired (checkout.session.expired), at most
// once: expired is false when the session has no order or it was already paid or expired.
func ExpireTopup(ctx context.Context, q Conn, sessionID string) (expired bool, err error) {
	n, err := dbsqlc.New(q).TopupsExpire(ctx, &sessionID)
	if err != nil {
		return false, fmt.Errorf("expire order of session %s: %w", sessionID, MapError(err))
	}
	return n == 1, nil
}
