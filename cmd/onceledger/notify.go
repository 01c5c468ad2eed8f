package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/notify"
)

// notifyStopTimeout bounds how long shutdown waits for deliveries in flight; those still running
// are cancelled and delivered again after the next start.
const notifyStopTimeout = 15 * time.Second

// startNotifications starts delivering notifications when NOTIFY_URL is set, and returns the Ledger
// that enqueues them with every posting, and the stop to call before the pool closes. Without
// NOTIFY_URL the Ledger is the zero value: nothing is enqueued and no worker runs.
func startNotifications(ctx context.Context, e env, pool *pgxpool.Pool) (db.Ledger, func(), error) {
	if e.cfg.NotifyURL == "" {
		return db.Ledger{}, func() {}, nil
	}
	n, err := notify.New(pool, notify.Config{URL: e.cfg.NotifyURL, Secret: e.cfg.NotifySecret, Log: e.log})
	if err != nil {
		return db.Ledger{}, nil, err
	}
	// Not ctx: a signal must not cancel deliveries in flight; stop lets them finish first.
	if err := n.Start(context.WithoutCancel(ctx)); err != nil {
		return db.Ledger{}, nil, err
	}
	stop := func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), notifyStopTimeout)
		defer cancel()
		if err := n.Stop(stopCtx); err != nil {
			e.log.Error("stopping notifications", "error", err.Error())
		}
	}
	return db.Ledger{OnPosted: n.Enqueue}, stop, nil
}

// openLedger opens the pool and the Ledger of a command that posts but does not deliver (replay,
// reconcile): with NOTIFY_URL, each new entry's notification is enqueued in its transaction, for serve's
// worker to deliver. The caller closes the pool.
func (e env) openLedger(ctx context.Context) (*pgxpool.Pool, db.Ledger, error) {
	pool, err := e.openPool(ctx)
	if err != nil {
		return nil, db.Ledger{}, err
	}
	if e.cfg.NotifyURL == "" {
		return pool, db.Ledger{}, nil
	}
	n, err := notify.New(pool, notify.Config{URL: e.cfg.NotifyURL, Secret: e.cfg.NotifySecret, Log: e.log})
	if err != nil {
		pool.Close()
		return nil, db.Ledger{}, err
	}
	return pool, db.Ledger{OnPosted: n.Enqueue}, nil
}
