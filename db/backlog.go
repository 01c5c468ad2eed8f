package db

import (
	"context"
	"fmt"
	"time"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// What is waiting for an operator or for the reconciler: parked events, decisions whose account does
// not exist, decisions not billed yet.

// ParkedReason counts the parked events of one parking reason.
type ParkedReason struct {
	Reason           string
	Events           int64
	Unreviewed       int64 // of Events, those no operator has reviewed
	OldestReceivedAt time.Time
}

// ParkedEventsByReason counts parked events per reason, reasons in name order; empty when none is
// parked.
func ParkedEventsByReason(ctx context.Context, q Conn) ([]ParkedReason, error) {
	rows, err := dbsqlc.New(q).StripeEventsParkedByReason(ctx)
	if err != nil {
		return nil, fmt.Errorf("count parked events: %w", MapError(err))
	}
	out := make([]ParkedReason, len(rows))
	for i, r := range rows {
		out[i] = ParkedReason{Reason: r.ParkedReason, Events: r.Events, Unreviewed: r.Unreviewed, OldestReceivedAt: r.OldestReceivedAt}
	}
	return out, nil
}

// MissingAccount is an account that decisions name but that does not exist yet.
type MissingAccount struct {
	AccountID        string
	Decisions        int64
	OldestReceivedAt time.Time
}

// DecisionsWaitingForAccounts returns at most limit missing accounts with the decisions waiting for
// them, most decisions first. It reads every decision: for the console, not for a hot path.
func DecisionsWaitingForAccounts(ctx context.Context, q Conn, limit int32) ([]MissingAccount, error) {
	rows, err := dbsqlc.New(q).DecisionsWaitingForAccounts(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("find decisions waiting for accounts: %w", MapError(err))
	}
	out := make([]MissingAccount, len(rows))
	for i, r := range rows {
		out[i] = MissingAccount(r)
	}
	return out, nil
}

// BillingLag is how far usage billing is behind, among the latest Window decisions.
type BillingLag struct {
	Window int64
	// Unbilled counts those of the latest Window decisions whose account exists but that are not
	// billed yet; equal to Window, the backlog may reach further back.
	Unbilled int64
	// Lag is how long the oldest of them has waited (zero when none).
	Lag time.Duration
}

// MeasureBillingLag looks at the latest window decisions and tells how many of those that can be
// billed are not, and for how long the oldest has waited, by the database's clock.
func MeasureBillingLag(ctx context.Context, q Conn, window int32) (BillingLag, error) {
	r, err := dbsqlc.New(q).DecisionsBillingLag(ctx, window)
	if err != nil {
		return BillingLag{}, fmt.Errorf("measure billing lag: %w", MapError(err))
	}
	lag := time.Duration(max(r.LagSeconds, 0) * float64(time.Second)).Round(time.Second)
	return BillingLag{Window: int64(window), Unbilled: r.Unbilled, Lag: lag}, nil
}
