package db_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

// Credits on one account from 64 goroutines: one transaction per posting, against db.Poster's
// groups with a few windows.
func BenchmarkHotAccountPostings(b *testing.B) {
	const concurrency = 64
	type postFunc func(ctx context.Context, p db.Posting) error
	oneTx := func(pool *db.Pool) postFunc {
		return func(ctx context.Context, p db.Posting) error {
			return db.InTx(ctx, pool, func(tx pgx.Tx) error {
				_, err := ledger.Post(ctx, tx, p)
				return err
			})
		}
	}
	grouped := func(window time.Duration) func(*db.Pool) postFunc {
		return func(pool *db.Pool) postFunc {
			poster := dbtest.Ledger(b, pool, db.LedgerConfig{Groups: db.GroupOptions{Window: window}})
			return func(ctx context.Context, p db.Posting) error {
				_, err := poster.PostGrouped(ctx, p)
				return err
			}
		}
	}
	cases := []struct {
		name string
		make func(*db.Pool) postFunc
	}{
		{"one-tx-per-posting", oneTx},
		{"group-commit/window=0.5ms", grouped(500 * time.Microsecond)},
		{"group-commit/window=2ms", grouped(2 * time.Millisecond)},
		{"group-commit/window=5ms", grouped(5 * time.Millisecond)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			pool := dbtest.New(b)
			if _, err := dbtest.Ledger(b, pool).CreateAccount(context.Background(), "acct_hot", "usd", 0); err != nil {
				b.Fatal(err)
			}
			post := c.make(pool)
			var keys atomic.Int64
			b.SetParallelism(max(1, concurrency/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p := db.Posting{
						AccountID: "acct_hot", Kind: db.KindAdjustment, Amount: 1, NoOverdraw: true,
						DedupeKey: fmt.Sprintf("api:acct_hot:%d", keys.Add(1)),
					}
					if err := post(context.Background(), p); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
