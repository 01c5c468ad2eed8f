package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/onceledger/onceledger/api"
)

// serve runs the HTTP server until ctx is cancelled (SIGINT/SIGTERM), then drains in-flight requests
// and closes the pool last.
func serve(ctx context.Context, e env) error {
	pool, err := e.openPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()

	srv := &http.Server{
		Handler:           api.NewHandler(api.Deps{Pool: pool, Log: e.log, Config: e.cfg}),
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
