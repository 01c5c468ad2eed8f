// Package db is the one door to the database: the pool, one transaction helper, the mapping from
// PostgreSQL errors to sentinels, and every operation the rest of onceledger runs, each named after
// what it does and answering with the domain types and sentinels declared here. The SQL lives in
// sql/queries; the code sqlc generates from it is db/internal/dbsqlc, which no other package can
// import. Above db nothing sees a generated row, pgx.ErrNoRows or a PostgreSQL error code.
package db

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Option configures the pool Open returns.
type Option func(*poolConfig)

type poolConfig = pgxpool.Config

// Open returns a pool for databaseURL after checking that the database answers, sized as the URL
// says (pool_max_conns) or by pgxpool's default unless WithMaxConns says otherwise. Its sessions
// run with jit off unless the URL names jit itself: onceledger's statements are short, and the
// planner's estimates for the billing statement's chained CTEs (rows multiplied at each self-join,
// 10^26 at the last) cross jit_above_cost, so PostgreSQL would spend 2–3 s compiling a statement
// that runs in about one.
func Open(ctx context.Context, databaseURL string, opts ...Option) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	if _, named := cfg.ConnConfig.RuntimeParams["jit"]; !named {
		cfg.ConnConfig.RuntimeParams["jit"] = "off"
	}
	for _, o := range opts {
		o(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to %s: %w", redact(cfg), err)
	}
	return pool, nil
}

// WithMaxConns sizes the pool at n connections (DB_MAX_CONNS); 0 keeps the size Open would choose.
func WithMaxConns(n int32) Option {
	return func(cfg *poolConfig) {
		if n > 0 {
			cfg.MaxConns = n
		}
	}
}

func redact(cfg *pgxpool.Config) string {
	return fmt.Sprintf("postgres://%s@%s:%d/%s", cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
}

// Pool is the connection pool Open returns; Tx is a transaction (or savepoint) InTx hands to its
// function. Aliases, so that callers name them through db alone.
type (
	Pool = pgxpool.Pool
	Tx   = pgx.Tx
)

// Conn is what a single operation runs on: the Pool, or a Tx to make it part of a transaction.
type Conn interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Beginner is what InTx needs: a pool, or a connection.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// InTx runs fn in one transaction: committed when fn returns nil, rolled back otherwise, a panic in
// fn included (rolled back, then the panic goes on up). It is the only place that begins, commits or
// rolls back. The rollback runs even when ctx was cancelled, so a client that went away never leaves a
// transaction open, and its connection goes back to the pool.
func InTx(ctx context.Context, b Beginner, fn func(tx Tx) error) error {
	tx, err := b.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", MapError(err))
	}
	committed := false
	defer func() {
		// Every way out but a commit rolls back: an error, a failed commit, a panic.
		if !committed {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", MapError(err))
	}
	committed = true
	return nil
}

// isNoRows reports whether err is the generated queries' "no row" outcome.
func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }
