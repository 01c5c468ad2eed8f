package api

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/config"
	"github.com/onceledger/onceledger/internal/stripeevents"
)

// WiredDeps wires the handlers on pool as the binary does by default: one Stripe client from cfg (nil
// without a key), one Ledger configured as ledger says and committing paid Checkout Sessions in groups,
// one event processor posting through it, and one River client, all traced by ledger.Tracing when it
// is set (the pool's statements are the pool's to trace). Metrics is left for the test to set.
func WiredDeps(pool *pgxpool.Pool, cfg config.Config, log *slog.Logger, ledgerCfg db.LedgerConfig) Deps {
	ledgerCfg.GroupCheckouts = true
	ledger := db.NewLedger(pool, ledgerCfg)
	// Enqueues only: the jobs (parked events a top-up could not re-apply) are worked by serve.
	jobs, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		panic(err)
	}
	tr := ledgerCfg.Tracing
	stripe := stripeevents.NewStripeClient(cfg.StripeSecretKey, cfg.StripeAPIBase, tr)
	events := &stripeevents.Processor{
		Pool: pool, Ledger: ledger, Stripe: stripe, Livemode: cfg.Livemode, Log: log,
		Reapply: stripeevents.NewReapplier(jobs), Tracing: tr,
	}
	return Deps{Pool: pool, Log: log, Config: cfg, Ledger: ledger, Stripe: stripe, Events: events, Jobs: jobs, Tracing: tr}
}

// BillStored is billStored for the external tests: bills every decision stored so far.
var BillStored = billStored
