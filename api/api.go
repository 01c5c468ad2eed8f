// Package api is onceledger's HTTP surface: the routes (routes.go), the handlers, the Stripe webhook,
// and the JSON shapes on the wire. Handlers reach the database only through package db.
package api

import (
	"log/slog"
	"net/http"

	"github.com/riverqueue/river"
	"github.com/stripe/stripe-go/v79/client"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/access"
	"github.com/onceledger/onceledger/internal/config"
	"github.com/onceledger/onceledger/internal/metrics"
	"github.com/onceledger/onceledger/internal/stripeevents"
	"github.com/onceledger/onceledger/internal/tracing"
)

// Deps is what the handlers need; the binary builds each of them once and hands them in.
type Deps struct {
	Pool   *db.Pool
	Log    *slog.Logger
	Config config.Config
	// Ledger posts every entry, so that its side effects (notifications) ride along, and groups the
	// concurrent postings and hold authorisations of a hot account into one transaction each.
	Ledger *db.Ledger
	// Metrics is exported at /metrics; a fresh set when nil.
	Metrics *metrics.Metrics
	// Stripe creates the top-ups' Checkout Sessions; nil when no key is configured (top-ups answer 503).
	Stripe *client.API
	// Events applies every verified webhook delivery: the processor replay and the reconciler use too.
	Events *stripeevents.Processor
	// Jobs is the process's River client; the console lists given-up notifications through it.
	Jobs *river.Client[db.Tx]
	// Tracing traces every route and the webhook's verification; nil is off.
	Tracing *tracing.Tracing
	// Audit records who did what (package audit); NewHandler makes it on Pool when nil.
	Audit *db.AuditTrail
	// Throttle slows down the guessing of keys at the bearer check and the console's login; NewHandler
	// makes one with the service's settings when nil.
	Throttle *access.Throttle
}

// NewHandler returns the whole HTTP surface.
func NewHandler(d Deps) http.Handler {
	if d.Metrics == nil {
		d.Metrics = metrics.New()
	}
	if d.Throttle == nil {
		d.Throttle = access.NewThrottle()
	}
	if d.Audit == nil && d.Pool != nil {
		d.Audit = db.NewAuditTrail(d.Pool)
	}
	return allowHosts(d.Config.AllowedHosts, routes(d))
}
