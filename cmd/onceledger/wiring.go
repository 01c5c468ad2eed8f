package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v79/client"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/notify"
	"github.com/onceledger/onceledger/internal/recharge"
	"github.com/onceledger/onceledger/internal/stripeevents"
)

// notifyStopTimeout bounds how long shutdown waits for deliveries and re-applications in flight; those
// still running are cancelled and run again after the next start.
const notifyStopTimeout = 15 * time.Second

// wiring is what the commands that move money share, each built once here from the configuration and
// handed in (api.Deps, reconcile.Deps): the pool, the Ledger every entry is posted through (the one
// road into the money, with its group commit), the one Stripe client and the one processor of Stripe
// events.
type wiring struct {
	pool   *pgxpool.Pool
	ledger *db.Ledger
	// stripe is nil when STRIPE_SECRET_KEY is unset.
	stripe *client.API
	events *stripeevents.Processor
	// close stops notification delivery (letting deliveries in flight finish), then closes the pool.
	close func()
}

// wire opens the pool and builds the rest. With NOTIFY_URL, every new entry's notification is enqueued
// in its transaction; deliver (serve) also runs the worker that delivers them, which the other
// commands leave to serve. observe, when set, sees every posting (serve's metrics).
func (e env) wire(ctx context.Context, deliver bool, observe func(kind, result string)) (*wiring, error) {
	pool, err := e.openPool(ctx)
	if err != nil {
		return nil, err
	}
	w := &wiring{pool: pool, close: pool.Close}
	ledgerCfg := db.LedgerConfig{
		Observe: observe, PaidCreditTTL: e.cfg.PaidCreditTTL, GrantTTL: e.cfg.GrantTTL,
		GroupCheckouts: e.cfg.WebhookGroupCommit,
	}
	var notifier *notify.Notifier
	if e.cfg.NotifyURL != "" {
		n, err := notify.New(pool, notify.Config{URL: e.cfg.NotifyURL, Secret: e.cfg.NotifySecret, Log: e.log})
		if err != nil {
			pool.Close()
			return nil, err
		}
		ledgerCfg.OnPosted = n.Enqueue
		notifier = n
		if deliver {
			// Not ctx: a signal must not cancel deliveries in flight; close lets them finish first.
			if err := n.Start(context.WithoutCancel(ctx)); err != nil {
				pool.Close()
				return nil, err
			}
			w.close = func() {
				stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), notifyStopTimeout)
				defer cancel()
				if err := n.Stop(stopCtx); err != nil {
					e.log.Error("stopping notifications", "error", err.Error())
				}
				pool.Close()
			}
		}
	}
	// Which backend the database runs on, asked once, for the life of the process.
	if ledgerCfg.Distributed, err = db.Distributed(ctx, pool); err != nil {
		w.close()
		return nil, err
	}
	w.ledger = db.NewLedger(pool, ledgerCfg)
	w.stripe = stripeevents.NewStripeClient(e.cfg.StripeSecretKey, e.cfg.StripeAPIBase)
	w.events = &stripeevents.Processor{Pool: pool, Ledger: w.ledger, Stripe: w.stripe, Livemode: e.cfg.Livemode, Log: e.log}
	if e.cfg.Livemode == nil {
		e.log.Warn("Stripe mode unknown: events of test and live mode are both accepted; set STRIPE_SECRET_KEY or STRIPE_LIVEMODE")
	}
	// Every command enqueues the re-application of parked events; serve also works the jobs.
	reapplier, err := stripeevents.NewReapplier(pool, w.events)
	if err != nil {
		w.close()
		return nil, err
	}
	if deliver {
		if err := reapplier.Start(context.WithoutCancel(ctx)); err != nil {
			w.close()
			return nil, err
		}
		closeRest := w.close
		w.close = func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), notifyStopTimeout)
			defer cancel()
			if err := reapplier.Stop(stopCtx); err != nil {
				e.log.Error("stopping the re-application of parked events", "error", err.Error())
			}
			closeRest()
		}
		if err := w.startRecharge(ctx, e, notifier); err != nil {
			w.close()
			return nil, err
		}
	}
	return w, nil
}

// startRecharge works the auto-recharge outbox (serve only): the sweeper turns committed attempts and
// alerts into jobs, the charger creates the PaymentIntents. Both stop before the rest closes.
func (w *wiring) startRecharge(ctx context.Context, e env, notifier *notify.Notifier) error {
	charger, err := recharge.NewCharger(w.pool, w.stripe, e.log)
	if err != nil {
		return err
	}
	if err := charger.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	sweeper := &recharge.Sweeper{Pool: w.pool, Charger: charger, Notifier: notifier, Log: e.log}
	sweeper.Start(context.WithoutCancel(ctx))
	closeRest := w.close
	w.close = func() {
		sweeper.Stop()
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), notifyStopTimeout)
		defer cancel()
		if err := charger.Stop(stopCtx); err != nil {
			e.log.Error("stopping recharge jobs", "error", err.Error())
		}
		closeRest()
	}
	return nil
}
