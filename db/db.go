// Package db is the hand-written data layer over the generated queries in db/dbsqlc: the pool, one
// transaction helper, the mapping from PostgreSQL errors to sentinels, and the operations whose
// guarantees take more than one statement (posting an entry, creating an account).
//
// It is the only package that imports pgconn: everything above it sees sentinels.
package db

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Open returns a pool for databaseURL after checking that the database answers.
func Open(ctx context.Context, databaseURL string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
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

func redact(cfg *pgxpool.Config) string {
	return fmt.Sprintf("postgres://%s@%s:%d/%s", cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
}

// Beginner is what InTx needs: a pool, or a connection.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// InTx runs fn in one transaction: committed when fn returns nil, rolled back otherwise. It is the
// only place that begins, commits or rolls back. The rollback runs even when ctx was cancelled, so a
// client that went away never leaves a transaction open.
func InTx(ctx context.Context, b Beginner, fn func(tx pgx.Tx) error) (err error) {
	tx, err := b.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", MapError(err))
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", MapError(err))
	}
	return nil
}

// IsNoRows reports whether err is the generated queries' "no row" outcome.
func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }
