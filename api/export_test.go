package api

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/config"
	"github.com/onceledger/onceledger/internal/stripeevents"
)

// WiredDeps wires the handlers on pool as the binary does by default: one Stripe client from cfg (nil
// without a key), one event processor committing paid Checkout Sessions in groups, one group-commit
// Poster and hold authoriser, all posting through ledger. Metrics is left for the test to set.
func WiredDeps(pool *pgxpool.Pool, cfg config.Config, log *slog.Logger, ledger db.Ledger) Deps {
	stripe := stripeevents.NewStripeClient(cfg.StripeSecretKey, cfg.StripeAPIBase)
	events := &stripeevents.Processor{
		Pool: pool, Ledger: ledger, Stripe: stripe, Livemode: cfg.Livemode, Log: log, Checkouts: db.NewCheckoutGrouper(pool, ledger),
	}
	// Enqueues only: the jobs, for parked events the top-up could not re-apply, are worked by serve.
	if _, err := stripeevents.NewReapplier(pool, events); err != nil {
		panic(err)
	}
	return Deps{
		Pool: pool, Log: log, Config: cfg, Ledger: ledger,
		Poster: db.NewPoster(pool, ledger, db.PosterOptions{}),
		Holds:  db.NewHoldAuthoriser(pool, db.PosterOptions{}),
		Stripe: stripe, Events: events,
	}
}
