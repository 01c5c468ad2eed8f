package api

import (
	"net/http"
	"time"

	"github.com/onceledger/onceledger/db"
)

// What GET /v1/reports/stripe-drift lists: bounded, so that a long incident never makes it slow.
const (
	driftOpenListed       = 1000
	driftResolvedListed   = 100
	driftResolvedWithin   = 7 * 24 * time.Hour
	driftCheckpointsShown = 31
)

type stripeDriftJSON struct {
	AccountID     *string    `json:"account_id"`
	Reason        string     `json:"reason"`
	ObjectID      string     `json:"object_id"`
	PaymentIntent *string    `json:"payment_intent"`
	StripeAmount  *int64     `json:"stripe_amount"`
	LedgerAmount  *int64     `json:"ledger_amount"`
	Currency      *string    `json:"currency"`
	Detail        string     `json:"detail"`
	EventID       *string    `json:"event_id"`
	ObjectCreated time.Time  `json:"object_created"`
	FoundAt       time.Time  `json:"found_at"`
	LastSeenAt    time.Time  `json:"last_seen_at"`
	ResolvedAt    *time.Time `json:"resolved_at"`
}

type driftCheckpointJSON struct {
	WindowStart time.Time `json:"window_start"`
	WindowEnd   time.Time `json:"window_end"`
	Objects     int32     `json:"objects"`
	Credits     int32     `json:"credits"`
	Digest      string    `json:"digest"`
	CreatedAt   time.Time `json:"created_at"`
}

// handleGetStripeDrift reports whether Stripe and the ledger agree (SPEC §20): the open drift, the drift
// resolved in the last week, and the newest checkpoints of clean windows.
func handleGetStripeDrift(d Deps) http.Handler {
	type response struct {
		Open        []stripeDriftJSON     `json:"open"`
		Resolved    []stripeDriftJSON     `json:"resolved"`
		Checkpoints []driftCheckpointJSON `json:"checkpoints"`
	}
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		ctx := r.Context()
		open, err := db.OpenDrift(ctx, d.Pool, driftOpenListed)
		if err != nil {
			return err
		}
		resolved, err := db.ResolvedDriftSince(ctx, d.Pool, time.Now().Add(-driftResolvedWithin), driftResolvedListed)
		if err != nil {
			return err
		}
		checkpoints, err := db.DriftCheckpoints(ctx, d.Pool, driftCheckpointsShown)
		if err != nil {
			return err
		}
		out := response{Open: driftJSON(open), Resolved: driftJSON(resolved), Checkpoints: make([]driftCheckpointJSON, len(checkpoints))}
		for i, c := range checkpoints {
			out.Checkpoints[i] = driftCheckpointJSON{
				WindowStart: c.WindowStart, WindowEnd: c.WindowEnd, Objects: c.Objects, Credits: c.Credits, Digest: c.Digest,
				CreatedAt: c.CreatedAt,
			}
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}

func driftJSON(list []db.Drift) []stripeDriftJSON {
	out := make([]stripeDriftJSON, len(list))
	for i, d := range list {
		out[i] = stripeDriftJSON{
			AccountID: orNull(d.AccountID), Reason: d.Reason, ObjectID: d.ObjectID, PaymentIntent: orNull(d.PaymentIntent),
			StripeAmount: nonZero(d.StripeAmount), LedgerAmount: nonZero(d.LedgerAmount), Currency: orNull(d.Currency),
			Detail: d.Detail, EventID: orNull(d.EventID), ObjectCreated: d.ObjectCreated, FoundAt: d.FoundAt,
			LastSeenAt: d.LastSeenAt, ResolvedAt: d.ResolvedAt,
		}
	}
	return out
}

// nonZero is n, or null for 0 (none).
func nonZero(n int64) *int64 {
	if n == 0 {
		return nil
	}
	return &n
}
