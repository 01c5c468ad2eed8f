package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// step is one generated query of a pipelined transaction: it calls the query on q and keeps its
// result, returning the query's error.
type step func(q *dbsqlc.Queries) error

// beginPipelined begins a transaction on pool and runs steps in it, all in one round trip: one pgx
// batch whose first query is BEGIN. A positive lockTimeout bounds every lock wait of the transaction
// (SET LOCAL lock_timeout, on every node of a Citus cluster): a statement that would wait longer fails
// with lock_not_available. Each step is called twice with the same arguments, first to queue its
// statement (the generated code gets errQueued, which is ignored) and then, once the batch is sent, to
// read its result (the generated code scans the batch's next result), so the SQL and its scanning stay
// sqlc's. errs holds each step's error: after a failed statement PostgreSQL skips the rest, whose
// errors then say so. err is set, and the transaction already closed, only when the batch could not
// begin it. Otherwise the caller must commit or roll back tx, through endPipelined: with InTx, the only
// places that end a transaction.
func beginPipelined(ctx context.Context, pool *Pool, lockTimeout time.Duration, steps []step) (tx Tx, errs []error, err error) {
	batch := &pgx.Batch{}
	// READ COMMITTED whatever the server's default: each statement's snapshot must see what committed
	// while an earlier one waited for a lock.
	batch.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if lockTimeout > 0 {
		// On Citus a row's lock is waited for on its worker: the coordinator hands the timeout on to the
		// workers' parts of the transaction only when told to (a placeholder setting on plain PostgreSQL).
		batch.Queue("SET LOCAL citus.propagate_set_commands = 'local'")
		batch.Queue(fmt.Sprintf("SET LOCAL lock_timeout = %d", lockTimeout.Milliseconds()))
	}
	// BEGIN and the settings: the results to read before the steps'.
	begin := batch.Len()
	queue := dbsqlc.New(queueing{batch})
	for _, s := range steps {
		_ = s(queue)
	}
	results := pool.SendBatch(ctx, batch)
	tx = results.Tx()
	for range begin {
		if _, err := results.Exec(); err != nil {
			_ = results.Close()
			if tx != nil {
				_ = tx.Rollback(context.WithoutCancel(ctx))
			}
			return nil, nil, fmt.Errorf("begin: %w", MapError(err))
		}
	}
	read := dbsqlc.New(reading{results})
	errs = make([]error, len(steps))
	for i, s := range steps {
		errs[i] = s(read)
	}
	if err := results.Close(); err != nil && firstError(errs) == nil {
		// Every statement answered, and still the batch failed: nothing it did can be trusted.
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil, nil, fmt.Errorf("pipelined statements: %w", MapError(err))
	}
	return tx, errs, nil
}

// endPipelined commits tx when commit is true and rolls it back otherwise; the rollback runs even when
// ctx was cancelled, as InTx's does.
func endPipelined(ctx context.Context, tx Tx, commit bool) error {
	if !commit {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", MapError(err))
	}
	return nil
}

// firstError is the error of the first step that failed: the cause, where the later ones only say
// that the transaction was aborted.
func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// errQueued is what a generated query gets while its statement is only being queued.
var errQueued = errors.New("statement queued in a batch, not run yet")

// queueing adds each statement the generated code runs to a batch instead of running it.
type queueing struct{ batch *pgx.Batch }

func (q queueing) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	q.batch.Queue(sql, args...)
	return pgconn.CommandTag{}, errQueued
}

func (q queueing) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	q.batch.Queue(sql, args...)
	return nil, errQueued
}

func (q queueing) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	q.batch.Queue(sql, args...)
	return queuedRow{}
}

type queuedRow struct{}

func (queuedRow) Scan(...any) error { return errQueued }

// reading hands the generated code the batch's results, in the order its statements were queued.
type reading struct{ results pgx.BatchResults }

func (r reading) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return r.results.Exec()
}

func (r reading) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return r.results.Query()
}

func (r reading) QueryRow(context.Context, string, ...any) pgx.Row {
	return r.results.QueryRow()
}
