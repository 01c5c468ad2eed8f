package api

import (
	"net/http"
	"time"

	"github.com/onceledger/onceledger/db"
)

// eventOutcomes are the outcomes stripe_events_outcome_check allows.
var eventOutcomes = map[string]bool{"applied": true, "recorded": true, "ignored": true, "parked": true}

type stripeEventJSON struct {
	ID            string     `json:"id"`
	Seq           int64      `json:"seq"`
	Type          string     `json:"type"`
	APIVersion    string     `json:"api_version"`
	Livemode      bool       `json:"livemode"`
	Created       time.Time  `json:"created"`
	ReceivedAt    time.Time  `json:"received_at"`
	Outcome       string     `json:"outcome"`
	ParkedReason  *string    `json:"parked_reason"`
	PaymentIntent *string    `json:"payment_intent"`
	OutcomeAt     time.Time  `json:"outcome_at"`
	ReviewedAt    *time.Time `json:"reviewed_at"`
}

// handleListStripeEvents lists stored Stripe events in arrival order, for operators: keyset
// pagination on seq (?after=), optionally only one outcome (?outcome=parked).
func handleListStripeEvents(d Deps) http.Handler {
	type response struct {
		Events []stripeEventJSON `json:"events"`
		Next   *string           `json:"next"`
	}
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		outcome := r.URL.Query().Get("outcome")
		if outcome != "" && !eventOutcomes[outcome] {
			return badRequest("invalid_outcome", "outcome must be one of applied, recorded, ignored, parked")
		}
		limit, after, err := pageQuery(r, "after")
		if err != nil {
			return err
		}
		rows, err := db.ListEvents(r.Context(), d.Pool, outcome, after, int32(limit+1))
		if err != nil {
			return err
		}
		rows, next := onePage(rows, limit, func(e db.Event) int64 { return e.Seq })
		out := response{Events: make([]stripeEventJSON, 0, len(rows)), Next: next}
		for _, e := range rows {
			out.Events = append(out.Events, stripeEventJSON{
				ID: e.ID, Seq: e.Seq, Type: e.Type, APIVersion: e.APIVersion, Livemode: e.Livemode,
				Created: e.Created, ReceivedAt: e.ReceivedAt, Outcome: e.Outcome, ParkedReason: orNull(e.ParkedReason),
				PaymentIntent: orNull(e.PaymentIntent), OutcomeAt: e.OutcomeAt, ReviewedAt: e.ReviewedAt,
			})
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}
