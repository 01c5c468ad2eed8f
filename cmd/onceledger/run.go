package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/config"
	"github.com/onceledger/onceledger/internal/pglocal"
)

// version is set at build time (-ldflags "-X main.version=…").
var version = "dev"

const usage = `usage: onceledger COMMAND

commands:
  serve                 serve the webhook, the API and the background work
  migrate up            apply every pending migration (ours, then the job queue's)
  migrate down N        revert the last N of ours (the job queue's tables stay)
  migrate version       print the schema version
  reconcile [--once]    bill unbilled decisions and recover missed Stripe events (every RECONCILE_INTERVAL)
  reconcile --stripe [--since T] [--until T]
                        check that Stripe and the ledger agree over a window (default: the days of the
                        last week without a checkpoint); non-zero exit on any drift
  verify                check every ledger invariant; non-zero exit on any violation
  review --by NAME EVENT_ID...
                        mark parked Stripe events as looked at by NAME: verify names NAME instead of
                        reporting them
  replay [--dry-run] EVENT_ID...
                        re-apply stored Stripe events (parked ones after a fix); never doubles an effect;
                        --dry-run prints the entries a replay would post, changing nothing
  demo [--url URL]      show every guarantee at work: on a scratch server, or driving the one at URL
  version               print the binary's version and schema version

configuration is read from the environment: see README.md`

// errUsage marks a command line that could not be understood.
var errUsage = errors.New(usage)

// exitCode is 2 for a misused command line, 1 for anything else.
func exitCode(err error) int {
	if errors.Is(err, errUsage) {
		return 2
	}
	return 1
}

// env is what every command gets: its configuration, a logger and where to print.
type env struct {
	cfg    config.Config
	log    *slog.Logger
	stdout io.Writer
	stderr io.Writer
}

// run is the whole binary, callable from tests: main only wires it to the process.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errUsage
	}
	cfg, err := config.Load(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	e := env{cfg: cfg, log: slog.New(slog.NewJSONHandler(stderr, nil)), stdout: stdout, stderr: stderr}

	switch cmd, rest := args[0], args[1:]; cmd {
	case "serve":
		return serve(ctx, e)
	case "migrate":
		return migrateCmd(ctx, e, rest)
	case "reconcile":
		return reconcileCmd(ctx, e, rest)
	case "verify":
		return verify(ctx, e, rest)
	case "review":
		return review(ctx, e, rest)
	case "replay":
		return replay(ctx, e, rest)
	case "demo":
		return demo(ctx, e, rest, getenv)
	case "version":
		latest, err := db.LatestMigration()
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "onceledger %s (schema %d)\n", version, latest)
		return nil
	case "help", "-h", "--help":
		fmt.Fprintln(stdout, usage)
		return nil
	default:
		return fmt.Errorf("unknown command %q: %w", cmd, errUsage)
	}
}

// databaseURL is DATABASE_URL, or else the "onceledger" database of the local server pglocal finds
// or starts.
func (e env) databaseURL(ctx context.Context) (string, error) {
	if e.cfg.DatabaseURL != "" {
		return e.cfg.DatabaseURL, nil
	}
	server, err := pglocal.Server(ctx, e.cfg.DataDir, e.log)
	if err != nil {
		return "", fmt.Errorf("no DATABASE_URL and no local PostgreSQL: %w", err)
	}
	return pglocal.Database(ctx, server, "onceledger")
}

// openPool opens the configured database, sized by DB_MAX_CONNS, configured further by opts.
func (e env) openPool(ctx context.Context, opts ...db.Option) (*pgxpool.Pool, error) {
	url, err := e.databaseURL(ctx)
	if err != nil {
		return nil, err
	}
	return db.Open(ctx, url, append(opts, db.WithMaxConns(e.cfg.DBMaxConns))...)
}
