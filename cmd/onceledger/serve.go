package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/onceledger/onceledger/api"
	"github.com/onceledger/onceledger/internal/metrics"
	"github.com/onceledger/onceledger/internal/reconcile"
	"github.com/onceledger/onceledger/internal/tracing"
)

// serve runs the HTTP server, the reconciler every RECONCILE_INTERVAL, the Stripe drift pass every
// STRIPE_RECONCILE_INTERVAL, and the jobs of the one River client (notifications when NOTIFY_URL is
// set, re-applications, recharges), until ctx is cancelled (SIGINT/SIGTERM); then it drains in-flight
// requests, stops the reconciler, the drift pass and the jobs, closes the pool, and sends the last
// spans when tracing is on (OTEL_EXPORTER_OTLP_ENDPOINT).
func serve(ctx context.Context, e env) error {
	if err := e.cfg.CheckServe(); err != nil {
		return err
	}
	tr, stopTracing, err := tracing.Start(ctx, e.cfg.Tracing, version, e.log)
	if err != nil {
		return err
	}
	defer func() {
		// Last: the jobs and requests that ended during shutdown have their spans sent too.
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingFlushTimeout)
		defer cancel()
		if err := stopTracing(flushCtx); err != nil {
			e.log.Warn("sending the last spans", "error", err.Error())
		}
	}()
	m := metrics.New()
	w, err := e.wire(ctx, true, m.ObservePosting, tr)
	if err != nil {
		return err
	}
	defer w.close() // after the HTTP server drained: the jobs stop, then the pool closes
	m.WatchPool(w.pool)
	deps := api.Deps{
		Pool: w.pool, Log: e.log, Config: e.cfg, Metrics: m, Ledger: w.ledger, Stripe: w.stripe, Events: w.events,
		Jobs: w.jobs, Tracing: tr,
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

	if e.cfg.PprofAddr != "" {
		stop, err := servePprof(e)
		if err != nil {
			_ = ln.Close()
			return err
		}
		defer stop()
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	rm := reconcile.NewMetrics(m.Registry)
	defer startReconciler(ctx, e, w, rm)()
	defer startStripeDrift(ctx, e, w, rm)()

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

// tracingFlushTimeout bounds how long shutdown waits for the collector to take the last spans.
const tracingFlushTimeout = 5 * time.Second

// servePprof serves net/http/pprof on PPROF_ADDR (loopback only, checked by config) until stop: the
// profiles of the running server, for finding what a request costs. Its own mux, so that nothing of
// it reaches the API's listener.
func servePprof(e env) (stop func(), err error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ln, err := net.Listen("tcp", e.cfg.PprofAddr)
	if err != nil {
		return nil, fmt.Errorf("listen for pprof on %s: %w", e.cfg.PprofAddr, err)
	}
	// No write timeout: a CPU profile or a trace streams for as long as it was asked to.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(e.stdout, "pprof listening on http://%s/debug/pprof/\n", ln.Addr())
	e.log.Info("pprof", "addr", ln.Addr().String())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return func() {
		_ = srv.Close()
		<-done
	}, nil
}
