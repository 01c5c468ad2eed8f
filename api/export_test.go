package api

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/config"
	"github.com/onceledger/onceledger/internal/stripeevents"
)

// WiredDeps wires the handlers on pool as the binary does by default: one Stripe client from cfg (nil
// without a key), one Ledger configured as ledger says and committing paid Checkout Sessions in groups,
// one event processor posting through it. Metrics is left for the test to set.
func WiredDeps(pool *pgxpool.Pool, cfg config.Config, log *slog.Logger, ledgerCfg db.LedgerConfig) Deps {
	ledgerCfg.GroupCheckouts = true
	ledger := db.NewLedger(pool, ledgerCfg)
	stripe := stripeevents.NewStripeClient(cfg.StripeSecretKey, cfg.StripeAPIBase)
	events := &stripeevents.Processor{Pool: pool, Ledger: ledger, Stripe: stripe, Livemode: cfg.Livemode, Log: log}
	// Enqueues only: the jobs, for parked events the top-up could not re-apply, are worked by serve.
	if _, err := stripeevents.NewReapplier(pool, events); err != nil {
		panic(err)
	}
	return Deps{Pool: pool, Log: log, Config: cfg, Ledger: ledger, Stripe: stripe, Events: events}
}
