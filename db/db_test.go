package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

// A panic inside InTx's function rolls the transaction back before it goes on up: no session is
// left idle in transaction holding the row it locked, another transaction locks that row at once,
// and the pool, which got its connection back, closes.
func TestInTxRollsBackOnPanic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.URL(t)
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	watcher, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(watcher.Close)
	createAccount(t, pool, "acct_panic")

	func() {
		defer func() {
			if r := recover(); r != "callback panicked" {
				t.Fatalf("recovered %v, want the callback's own panic", r)
			}
		}()
		_ = db.InTx(ctx, pool, func(tx db.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT 1 FROM accounts WHERE id = 'acct_panic' FOR UPDATE`); err != nil {
				t.Error(err)
			}
			panic("callback panicked")
		})
	}()

	if n := count(t, watcher, `SELECT count(*)::int FROM pg_stat_activity
		WHERE datname = current_database() AND state LIKE 'idle in transaction%'`); n != 0 {
		t.Fatalf("%d sessions left idle in transaction after the panic", n)
	}
	err = db.InTx(ctx, watcher, func(tx db.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '2s'`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT 1 FROM accounts WHERE id = 'acct_panic' FOR UPDATE`)
		return err
	})
	if err != nil {
		t.Fatalf("another transaction could not lock the row the panicked one had locked: %v", err)
	}
	closed := make(chan struct{})
	go func() {
		pool.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the pool did not close: the panicked transaction's connection was never given back")
	}
}
