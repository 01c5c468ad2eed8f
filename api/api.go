// Package api is onceledger's HTTP surface: the routes (routes.go), the handlers, the Stripe webhook,
// and the JSON shapes on the wire. Handlers reach the database only through package db.
package api

import (
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/config"
	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/metrics"
)

// Deps is what the handlers need; the binary builds it once.
type Deps struct {
	Pool   *pgxpool.Pool
	Log    *slog.Logger
	Config config.Config
	// Ledger posts every entry, so that its side effects (notifications) ride along.
	Ledger db.Ledger
	// Metrics is exported at /metrics; a fresh set when nil.
	Metrics *metrics.Metrics
	// Poster posts operator adjustments with group commit through Ledger, so that a hot account takes
	// many concurrent postings per transaction; each caller still gets its own posting's answer. One
	// over Pool and Ledger when nil.
	Poster *db.Poster
	// Holds authorises holds with group commit: concurrent authorisations of one (hot) account share
	// a transaction, each caller still getting its own answer. One over Pool when nil.
	Holds *db.HoldAuthoriser
}

// NewHandler returns the whole HTTP surface.
func NewHandler(d Deps) http.Handler {
	if d.Metrics == nil {
		d.Metrics = metrics.New()
	}
	if d.Poster == nil {
		d.Poster = db.NewPoster(d.Pool, d.Ledger, db.PosterOptions{})
	}
	if d.Holds == nil {
		d.Holds = db.NewHoldAuthoriser(d.Pool, db.PosterOptions{})
	}
	return routes(d)
}
