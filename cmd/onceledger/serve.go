package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/onceledger/onceledger/api"
	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/metrics"
	"github.com/onceledger/onceledger/reconcile"
)

// serve runs the HTTP server, the reconciler every RECONCILE_INTERVAL, and the notification worker
// when NOTIFY_URL is set, until ctx is cancelled (SIGINT/SIGTERM); then it drains in-flight requests,
// stops the reconciler and the worker, and closes the pool last.
func serve(ctx context.Context, e env) error {
	m := metrics.New()
	w, err := e.wire(ctx, true, m.ObservePosting)
	if err != nil {
		return err
	}
	defer w.close() // after the HTTP server drained: notifications stop, then the pool closes
	m.WatchPool(w.pool)
	deps := api.Deps{
		Pool: w.pool, Log: e.log, Config: e.cfg, Metrics: m, Ledger: w.ledger,
		Poster: db.NewPoster(w.pool, w.ledger, db.PosterOptions{}), Holds: db.NewHoldAuthoriser(w.pool, db.PosterOptions{}),
		Stripe: w.stripe, Events: w.events,
	}

	srv := &http.Server{
		Handler:           api.NewHandler(deps),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	ln, err := net.Listen("tcp", e.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", e.cfg.Addr, err)
	}
	fmt.Fprintf(e.stdout, "onceledger %s listening on http://%s\n", version, ln.Addr())
	e.log.Info("serving", "addr", ln.Addr().String(), "version", version)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer startReconciler(ctx, e, w, reconcile.NewMetrics(m.Registry))()

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	e.log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
