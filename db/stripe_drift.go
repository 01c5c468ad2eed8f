package db

import (
	"context"
	"fmt"
	"time"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// Drift reasons, as stripe_drift_reason_check knows them (SPEC §20).
const (
	// DriftMissingCredit: a succeeded payment of this deployment has no topup credit.
	DriftMissingCredit = "missing_credit"
	// DriftAmountDiffers: the ledger moved another amount than Stripe did (or credited a payment twice,
	// or in another currency).
	DriftAmountDiffers = "amount_differs"
	// DriftUnknownPayment: a money-backed credit whose Stripe object does not exist.
	DriftUnknownPayment = "unknown_payment"
	// DriftMissingRefund: a refund of one of our payments took nothing back.
	DriftMissingRefund = "missing_refund"
	// DriftMissingDispute: a chargeback of one of our payments took nothing back.
	DriftMissingDispute = "missing_dispute"
	// DriftStatusDiffers: the ledger holds a restore Stripe's state does not give, or lacks one it gives,
	// or credited a payment that did not succeed.
	DriftStatusDiffers = "status_differs"
)

// DriftReasons lists every reason, in the order reports show them.
var DriftReasons = []string{
	DriftMissingCredit, DriftAmountDiffers, DriftUnknownPayment, DriftMissingRefund, DriftMissingDispute, DriftStatusDiffers,
}

// Drift is one difference between Stripe and the ledger (a stripe_drift row). Empty strings and zero
// amounts mean none.
type Drift struct {
	// AccountID is empty when no account is known.
	AccountID string
	Reason    string
	// ObjectID is the Stripe object: a payment's PaymentIntent, a refund, a dispute; for a credit naming
	// no payment, its dedupe key.
	ObjectID      string
	PaymentIntent string
	// StripeAmount is what Stripe says moved; LedgerAmount what the ledger moved for it (positive).
	StripeAmount int64
	LedgerAmount int64
	Currency     string
	// Detail says what differs, for a person.
	Detail string
	// EventID is a stored, parked event whose replay would post what is missing.
	EventID string
	// ObjectCreated is when Stripe created the object (for unknown_payment, when the credit was posted).
	ObjectCreated time.Time
	FoundAt       time.Time
	LastSeenAt    time.Time
	ResolvedAt    *time.Time // nil: open
}

// DriftCheckpoint records a window in which everything matched (a stripe_drift_checkpoints row).
type DriftCheckpoint struct {
	WindowStart, WindowEnd time.Time
	// Objects are the Stripe objects matched (payments, refunds, disputes); Credits the money-backed
	// ledger credits of the window, all matched.
	Objects, Credits int32
	// Digest is the SHA-256 (hex) of the sorted match list.
	Digest    string
	CreatedAt time.Time
}

// DriftPass is what one pass of the drift check found, to record.
type DriftPass struct {
	// Found is the drift found, each (AccountID, Reason, ObjectID) once.
	Found []Drift
	// Checked are the objects the pass looked at (Drift.ObjectID's kind): their open drift not in Found
	// is resolved.
	Checked []string
	// Checkpoint, when set, is recorded for its window; set it only when Found is empty.
	Checkpoint *DriftCheckpoint
}

// DriftRecorded is what recording a pass changed.
type DriftRecorded struct {
	// Resolved counts the open drift the pass found matched.
	Resolved int64
	// Checkpointed: the pass's checkpoint was recorded now (false when the window had one already).
	Checkpointed bool
}

// RecordDriftPass records a pass in one transaction, one pass at a time: its drift (refreshed or
// reopened when already recorded, so a re-run adds nothing), the resolution of the checked objects'
// other open drift, and the checkpoint of a clean window (the first one stays). The pass makes no
// Stripe call in it.
func RecordDriftPass(ctx context.Context, b Beginner, pass DriftPass) (DriftRecorded, error) {
	n := len(pass.Found)
	found := dbsqlc.StripeDriftRecordParams{
		AccountIDs: make([]string, n), Reasons: make([]string, n), ObjectIDs: make([]string, n),
		PaymentIntents: make([]string, n), StripeAmounts: make([]int64, n), LedgerAmounts: make([]int64, n),
		Currencies: make([]string, n), Details: make([]string, n), EventIDs: make([]string, n),
		ObjectCreated: make([]time.Time, n),
	}
	for i, d := range pass.Found {
		found.AccountIDs[i], found.Reasons[i], found.ObjectIDs[i] = d.AccountID, d.Reason, d.ObjectID
		found.PaymentIntents[i], found.StripeAmounts[i], found.LedgerAmounts[i] = d.PaymentIntent, d.StripeAmount, d.LedgerAmount
		found.Currencies[i], found.Details[i], found.EventIDs[i] = d.Currency, d.Detail, d.EventID
		found.ObjectCreated[i] = d.ObjectCreated
	}
	var out DriftRecorded
	err := InTx(ctx, b, func(tx Tx) error {
		q := dbsqlc.New(tx)
		if err := q.StripeDriftLock(ctx); err != nil {
			return fmt.Errorf("wait for other drift passes: %w", MapError(err))
		}
		if _, err := q.StripeDriftRecord(ctx, found); err != nil {
			return fmt.Errorf("record %d drift: %w", n, MapError(err))
		}
		var err error
		out.Resolved, err = q.StripeDriftResolve(ctx, dbsqlc.StripeDriftResolveParams{
			CheckedIDs: pass.Checked, FoundAccountIDs: found.AccountIDs, FoundReasons: found.Reasons, FoundObjectIDs: found.ObjectIDs,
		})
		if err != nil {
			return fmt.Errorf("resolve drift of %d objects: %w", len(pass.Checked), MapError(err))
		}
		if c := pass.Checkpoint; c != nil {
			inserted, err := q.StripeDriftCheckpointInsert(ctx, dbsqlc.StripeDriftCheckpointInsertParams{
				WindowStart: c.WindowStart, WindowEnd: c.WindowEnd, Objects: c.Objects, Credits: c.Credits, Digest: c.Digest,
			})
			if err != nil {
				return fmt.Errorf("record the checkpoint of %s–%s: %w", c.WindowStart, c.WindowEnd, MapError(err))
			}
			out.Checkpointed = inserted == 1
		}
		return nil
	})
	return out, err
}

// GetDriftCheckpoint returns the checkpoint of the window [start, end), or ErrNotFound.
func GetDriftCheckpoint(ctx context.Context, q Conn, start, end time.Time) (DriftCheckpoint, error) {
	r, err := dbsqlc.New(q).StripeDriftCheckpointGet(ctx, dbsqlc.StripeDriftCheckpointGetParams{WindowStart: start, WindowEnd: end})
	if isNoRows(err) {
		return DriftCheckpoint{}, fmt.Errorf("checkpoint of %s–%s: %w", start, end, ErrNotFound)
	}
	if err != nil {
		return DriftCheckpoint{}, fmt.Errorf("read the checkpoint of %s–%s: %w", start, end, MapError(err))
	}
	return checkpointFromRow(r), nil
}

// DriftCheckpoints returns the newest checkpoints first, at most limit.
func DriftCheckpoints(ctx context.Context, q Conn, limit int32) ([]DriftCheckpoint, error) {
	rows, err := dbsqlc.New(q).StripeDriftCheckpointsList(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("list drift checkpoints: %w", MapError(err))
	}
	return checkpointsFromRows(rows), nil
}

// DriftCheckpointsSince returns the checkpoints of the windows starting at or after since, oldest first.
func DriftCheckpointsSince(ctx context.Context, q Conn, since time.Time) ([]DriftCheckpoint, error) {
	rows, err := dbsqlc.New(q).StripeDriftCheckpointsSince(ctx, since)
	if err != nil {
		return nil, fmt.Errorf("list drift checkpoints since %s: %w", since, MapError(err))
	}
	return checkpointsFromRows(rows), nil
}

func checkpointsFromRows(rows []dbsqlc.StripeDriftCheckpoint) []DriftCheckpoint {
	out := make([]DriftCheckpoint, len(rows))
	for i, r := range rows {
		out[i] = checkpointFromRow(r)
	}
	return out
}

func checkpointFromRow(r dbsqlc.StripeDriftCheckpoint) DriftCheckpoint {
	return DriftCheckpoint{
		WindowStart: r.WindowStart, WindowEnd: r.WindowEnd, Objects: r.Objects, Credits: r.Credits, Digest: r.Digest,
		CreatedAt: r.CreatedAt,
	}
}

// OpenDrift returns the open drift, oldest found first, at most limit.
func OpenDrift(ctx context.Context, q Conn, limit int32) ([]Drift, error) {
	rows, err := dbsqlc.New(q).StripeDriftOpen(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("list open drift: %w", MapError(err))
	}
	return driftFromRows(rows), nil
}

// ResolvedDriftSince returns the drift resolved at or after since, the latest first, at most limit.
func ResolvedDriftSince(ctx context.Context, q Conn, since time.Time, limit int32) ([]Drift, error) {
	rows, err := dbsqlc.New(q).StripeDriftResolvedSince(ctx, dbsqlc.StripeDriftResolvedSinceParams{Since: &since, MaxRows: limit})
	if err != nil {
		return nil, fmt.Errorf("list drift resolved since %s: %w", since, MapError(err))
	}
	return driftFromRows(rows), nil
}

func driftFromRows(rows []dbsqlc.StripeDrift) []Drift {
	out := make([]Drift, len(rows))
	for i, r := range rows {
		out[i] = Drift{
			AccountID: r.AccountID, Reason: r.Reason, ObjectID: r.ObjectID, PaymentIntent: deref(r.PaymentIntent),
			StripeAmount: deref(r.StripeAmount), LedgerAmount: deref(r.LedgerAmount), Currency: deref(r.Currency),
			Detail: r.Detail, EventID: deref(r.EventID), ObjectCreated: r.ObjectCreated, FoundAt: r.FoundAt,
			LastSeenAt: r.LastSeenAt, ResolvedAt: r.ResolvedAt,
		}
	}
	return out
}

// OpenDriftByReason counts the open drift per reason; a reason without any is absent.
func OpenDriftByReason(ctx context.Context, q Conn) (map[string]int64, error) {
	rows, err := dbsqlc.New(q).StripeDriftOpenByReason(ctx)
	if err != nil {
		return nil, fmt.Errorf("count open drift: %w", MapError(err))
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.Reason] = r.Open
	}
	return out, nil
}

// MoneyCreditsBetween returns the money-backed credits (topup, refund_restore, dispute_won) posted in
// [since, until), in posting order: what the drift pass matches to Stripe objects.
func MoneyCreditsBetween(ctx context.Context, q Conn, since, until time.Time) ([]Entry, error) {
	rows, err := dbsqlc.New(q).StripeDriftCreditsBetween(ctx, dbsqlc.StripeDriftCreditsBetweenParams{Since: since, Until: until})
	if err != nil {
		return nil, fmt.Errorf("credits posted %s–%s: %w", since, until, MapError(err))
	}
	return entriesFromRows(rows), nil
}

// PaymentCredits returns the topup credits of the given payments, in posting order.
func PaymentCredits(ctx context.Context, q Conn, paymentIntents []string) ([]Entry, error) {
	rows, err := dbsqlc.New(q).StripeDriftPaymentCredits(ctx, paymentIntents)
	if err != nil {
		return nil, fmt.Errorf("credits of %d payments: %w", len(paymentIntents), MapError(err))
	}
	return entriesFromRows(rows), nil
}

// EntriesByDedupeKeys returns the entries posted under any of keys; keys never posted return nothing.
func EntriesByDedupeKeys(ctx context.Context, q Conn, keys []string) ([]Entry, error) {
	rows, err := dbsqlc.New(q).LedgerListByDedupeKeys(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("entries of %d keys: %w", len(keys), MapError(err))
	}
	return entriesFromRows(rows), nil
}

func entriesFromRows[R entryRow](rows []R) []Entry {
	out := make([]Entry, len(rows))
	for i, r := range rows {
		out[i] = entryFromRow(dbsqlc.LedgerGetByDedupeKeyRow(r))
	}
	return out
}

// TopupsForPayments returns the orders of any of the given payments (payment_intent), Checkout
// Sessions or order ids.
func TopupsForPayments(ctx context.Context, q Conn, paymentIntents, sessionIDs, ids []string) ([]Topup, error) {
	rows, err := dbsqlc.New(q).TopupsListForPayments(ctx, dbsqlc.TopupsListForPaymentsParams{
		PaymentIntents: paymentIntents, SessionIDs: sessionIDs, IDs: ids,
	})
	if err != nil {
		return nil, fmt.Errorf("orders of %d payments, %d sessions, %d ids: %w", len(paymentIntents), len(sessionIDs), len(ids), MapError(err))
	}
	out := make([]Topup, len(rows))
	for i, r := range rows {
		out[i] = topupFromRow(r)
	}
	return out, nil
}

// ObjectEvent is a stored event of one Stripe object (its data.object.id) and the payment it belongs to.
type ObjectEvent struct {
	EventID, PaymentIntent, ObjectID string
}

// ParkedEventsForObjects returns the parked events of the given payments whose object is one of
// objectIDs, newest first: the events whose replay would post what a drift found missing.
func ParkedEventsForObjects(ctx context.Context, q Conn, paymentIntents, objectIDs []string) ([]ObjectEvent, error) {
	rows, err := dbsqlc.New(q).StripeEventsParkedForObjects(ctx, dbsqlc.StripeEventsParkedForObjectsParams{
		PaymentIntents: paymentIntents, ObjectIDs: objectIDs,
	})
	if err != nil {
		return nil, fmt.Errorf("parked events of %d payments: %w", len(paymentIntents), MapError(err))
	}
	out := make([]ObjectEvent, len(rows))
	for i, r := range rows {
		out[i] = ObjectEvent{EventID: r.EventID, PaymentIntent: r.PaymentIntent, ObjectID: r.ObjectID}
	}
	return out, nil
}
