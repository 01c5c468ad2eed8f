package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/access"
	"github.com/onceledger/onceledger/internal/pglocal"
	"github.com/onceledger/onceledger/internal/stripefake"
)

// The self-contained demo's own secrets: it is both Stripe and the product, talking to a server it
// started.
const (
	demoWebhookSecret = "whsec_demo_onceledger_local_only_not_secret"
	demoAPIKey        = "onceledger_demo_key_local_only_not_secret"
)

// demo is `onceledger demo [--url URL [--webhook-secret S] [--api-key K]]`. With --url it drives that
// running server (the secret and key default to STRIPE_WEBHOOK_SECRET's and ONCELEDGER_API_KEYS' first secret,
// as `make run` sets them). Without, it shows every guarantee at work in under a minute: it runs the
// real `serve` on a scratch database of the configured PostgreSQL, with the Stripe stand-in as its
// Stripe API. Either way it fails when a balance differs from what the guarantees say it must be.
func demo(ctx context.Context, e env, args []string, getenv func(string) string) error {
	flags := flag.NewFlagSet("demo", flag.ContinueOnError)
	flags.SetOutput(e.stderr)
	url := flags.String("url", "", "drive the server running at this base URL instead of starting one")
	secret := flags.String("webhook-secret", first(e.cfg.WebhookSecrets), "the server's webhook signing secret (with --url)")
	apiKey := flags.String("api-key", access.Secret(first(strings.Split(getenv("ONCELEDGER_API_KEYS"), ","))),
		"an API key the server accepts, with the spend, credit and operate scopes (with --url)")
	if err := flags.Parse(args); err != nil || flags.NArg() > 0 {
		return fmt.Errorf("%w: demo [--url URL [--webhook-secret S] [--api-key K]]", errUsage)
	}
	if *url == "" {
		return demoSelfContained(ctx, e, getenv)
	}
	if *secret == "" || *apiKey == "" {
		return fmt.Errorf("%w: demo --url needs the server's webhook secret and an API key (--webhook-secret and --api-key, or STRIPE_WEBHOOK_SECRET and ONCELEDGER_API_KEYS)", errUsage)
	}
	fmt.Fprintf(e.stdout, "onceledger demo: the server at %s; its Stripe API is not called (payloads carry their refunds)\n", *url)
	// Names of their own, so that a second run against the same server starts from a fresh account.
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	d, err := newDemoRun(e.stdout, strings.TrimRight(*url, "/"), *secret, *apiKey, tag, nil)
	if err != nil {
		return err
	}
	d.billingWait = e.cfg.ReconcileInterval + 5*time.Second
	return d.conclude(d.run(ctx))
}

func first(values []string) string {
	if len(values) == 0 {
		return ""
	}
	return values[0]
}

// demoSelfContained runs the scenario against a server of its own on a scratch database.
func demoSelfContained(ctx context.Context, e env, getenv func(string) string) error {
	databaseURL, name, drop, err := scratchDatabase(ctx, e)
	if err != nil {
		return err
	}
	defer drop()
	ms, err := db.OpenMigrations(databaseURL)
	if err != nil {
		return err
	}
	err = ms.Up()
	ms.Close()
	if err != nil {
		return err
	}

	stripeAPI := stripefake.New()
	defer stripeAPI.Close()
	overrides := map[string]string{
		"DATABASE_URL":          databaseURL,
		"ADDR":                  "127.0.0.1:0",
		"STRIPE_API_BASE":       stripeAPI.URL,
		"STRIPE_SECRET_KEY":     stripefake.SecretKey,
		"STRIPE_WEBHOOK_SECRET": demoWebhookSecret,
		"ONCELEDGER_API_KEYS":   demoAPIKey,
		"SIGNUP_GRANT":          "0",
		"NOTIFY_URL":            "",
		"RECONCILE_INTERVAL":    "1s",
	}
	base, logs, stop, err := startServer(ctx, func(k string) string {
		if v, ok := overrides[k]; ok {
			return v
		}
		return getenv(k)
	})
	if err != nil {
		return err
	}
	defer stop()

	fmt.Fprintf(e.stdout, "onceledger demo: the real server at %s on scratch database %s\n", base, name)
	fmt.Fprintf(e.stdout, "Stripe API: a loopback STAND-IN at %s (Checkout Sessions, a charge's refund list), not Stripe\n", stripeAPI.URL)
	d, err := newDemoRun(e.stdout, base, demoWebhookSecret, demoAPIKey, "", stripeAPI)
	if err != nil {
		return err
	}
	if err := d.run(ctx); err != nil {
		return d.conclude(fmt.Errorf("%w\nserver log:\n%s", err, logs()))
	}
	return d.conclude(nil)
}

// scratchDatabase creates a fresh database on the configured server (DATABASE_URL's, or the one
// pglocal finds or starts) and returns its URL, its name and a function that drops it.
func scratchDatabase(ctx context.Context, e env) (url, name string, drop func(), err error) {
	server := e.cfg.DatabaseURL
	if server == "" {
		if server, err = pglocal.Server(ctx, e.cfg.DataDir, e.log); err != nil {
			return "", "", nil, fmt.Errorf("no DATABASE_URL and no local PostgreSQL: %w", err)
		}
	}
	name = fmt.Sprintf("onceledger_demo_%d", time.Now().UnixNano())
	if url, err = pglocal.Database(ctx, server, name); err != nil {
		return "", "", nil, err
	}
	drop = func() {
		ctx := context.WithoutCancel(ctx)
		conn, err := pgx.Connect(ctx, server)
		if err != nil {
			e.log.Warn("demo: scratch database left behind", "database", name, "err", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			e.log.Warn("demo: scratch database left behind", "database", name, "err", err)
		}
	}
	return url, name, drop, nil
}

// startServer runs `onceledger serve` in this process with getenv and returns its base URL, its log
// so far, and a function that stops it and waits.
func startServer(ctx context.Context, getenv func(string) string) (string, func() string, func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	stdoutR, stdoutW := io.Pipe()
	var logMu sync.Mutex
	var logBuf bytes.Buffer
	logs := func() string {
		logMu.Lock()
		defer logMu.Unlock()
		return logBuf.String()
	}
	stderr := writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logBuf.Write(p)
	})
	done := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"serve"}, getenv, stdoutW, stderr)
		stdoutW.CloseWithError(io.EOF)
		done <- err
	}()
	stop := func() {
		cancel()
		<-done
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdoutR)
		for sc.Scan() {
			if _, url, ok := strings.Cut(sc.Text(), "listening on "); ok {
				addr <- strings.TrimSpace(url)
			}
		}
	}()
	select {
	case url := <-addr:
		return url, logs, stop, nil
	case err := <-done:
		cancel()
		return "", nil, nil, fmt.Errorf("demo: serve exited: %v\n%s", err, logs())
	case <-time.After(30 * time.Second):
		stop()
		return "", nil, nil, fmt.Errorf("demo: serve did not start\n%s", logs())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
