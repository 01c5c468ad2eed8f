package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stripe/stripe-go/v79/client"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/notify"
	"github.com/onceledger/onceledger/internal/recharge"
	"github.com/onceledger/onceledger/internal/stripeevents"
	"github.com/onceledger/onceledger/internal/tracing"
)

// jobsStopTimeout bounds how long shutdown waits for the jobs in flight (deliveries, re-applications,
// PaymentIntents); those still running are cancelled and run again after the next start.
const jobsStopTimeout = 15 * time.Second

// wiring is what the commands that move money share, each built once here from the configuration and
// handed in (api.Deps, reconcile.Deps): the pool, the Ledger every entry is posted through (the one
// road into the money, with its group commit), the one Stripe client, the one processor of Stripe
// events and the one River client.
type wiring struct {
	pool   *pgxpool.Pool
	ledger *db.Ledger
	// stripe is nil when STRIPE_SECRET_KEY is unset.
	stripe *client.API
	events *stripeevents.Processor
	// jobs is the process's River client, with every worker registered: every command enqueues
	// through it (notifications with their entries, re-applications of parked events, recharge
	// PaymentIntents); serve also works the jobs.
	jobs *river.Client[db.Tx]
	// close stops the jobs (letting those in flight finish), then closes the pool.
	close func()
}

// wire opens the pool and builds the rest. With NOTIFY_URL, every new entry's notification is enqueued
// in its transaction. work (serve) also starts the jobs' workers and the sweeper of the recharge
// outbox, which the other commands leave to serve. observe, when set, sees every posting (serve's
// metrics). tr, when tracing is on (serve), traces the statements, the group commits, the webhook's
// steps, the jobs and the Stripe calls.
func (e env) wire(ctx context.Context, work bool, observe func(kind, result string), tr *tracing.Tracing) (*wiring, error) {
	pool, err := e.openPool(ctx, db.WithTracing(tr))
	if err != nil {
		return nil, err
	}
	w := &wiring{pool: pool, close: pool.Close}
	w.stripe = stripeevents.NewStripeClient(e.cfg.StripeSecretKey, e.cfg.StripeAPIBase, tr)
	// Completed below, once the River client its re-application worker is registered with exists.
	w.events = &stripeevents.Processor{Pool: pool, Stripe: w.stripe, Livemode: e.cfg.Livemode, Log: e.log, Tracing: tr}
	if e.cfg.Livemode == nil {
		e.log.Warn("Stripe mode unknown: events of test and live mode are both accepted; set STRIPE_SECRET_KEY or STRIPE_LIVEMODE")
	}

	workers, queues := river.NewWorkers(), map[string]river.QueueConfig{}
	stripeevents.AddWorkers(workers, queues, w.events)
	recharge.AddWorkers(workers, queues, recharge.NewCharger(pool, w.stripe, e.log))
	notifyCfg := notify.Config{URL: e.cfg.NotifyURL, Secret: e.cfg.NotifySecret, Log: e.log}
	if e.cfg.NotifyURL != "" {
		if err := notify.AddWorkers(workers, queues, notifyCfg); err != nil {
			pool.Close()
			return nil, err
		}
	}
	w.jobs, err = river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger: e.log, Workers: workers, Queues: queues, DiscardedJobRetentionPeriod: notify.DiscardedRetention,
		Middleware: tr.JobMiddleware(),
	})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("job queue: %w", err)
	}

	ledgerCfg := db.LedgerConfig{
		Observe: observe, PaidCreditTTL: e.cfg.PaidCreditTTL, GrantTTL: e.cfg.GrantTTL,
		GroupCheckouts: e.cfg.WebhookGroupCommit, Tracing: tr,
	}
	var notifier *notify.Notifier
	if e.cfg.NotifyURL != "" {
		notifier = notify.NewNotifier(w.jobs, notifyCfg)
		ledgerCfg.OnPosted = notifier.Enqueue
	}
	w.ledger = db.NewLedger(pool, ledgerCfg)
	w.events.Ledger = w.ledger
	w.events.Reapply = stripeevents.NewReapplier(w.jobs)
	if work {
		sweeper := &recharge.Sweeper{Pool: pool, Jobs: w.jobs, Notifier: notifier, Log: e.log}
		if err := w.startJobs(ctx, e, sweeper); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return w, nil
}

// startJobs starts the River client's workers, then the sweeper that turns the recharge and alert
// outboxes into jobs. close then stops them in the reverse order, giving the jobs in flight
// jobsStopTimeout to finish, and closes the pool last.
func (w *wiring) startJobs(ctx context.Context, e env, sweeper *recharge.Sweeper) error {
	if err := db.CheckRiverTables(ctx, w.pool); err != nil {
		return err
	}
	// Not ctx: a signal must not cancel the jobs in flight; close lets them finish first.
	if err := w.jobs.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start the job queue (has `onceledger migrate up` run?): %w", err)
	}
	sweeper.Start(context.WithoutCancel(ctx))
	w.close = func() {
		sweeper.Stop()
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), jobsStopTimeout)
		defer cancel()
		if err := w.jobs.Stop(stopCtx); err != nil {
			// Out of time: cancel the jobs still running; River hands them back for the next start.
			if err := w.jobs.StopAndCancel(context.WithoutCancel(ctx)); err != nil {
				e.log.Error("stopping the job queue", "error", err.Error())
			}
		}
		w.pool.Close()
	}
	return nil
}
