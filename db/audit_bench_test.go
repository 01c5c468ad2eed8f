package db_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

// auditedRequest is one request of a hot account with its audit record, recorded as the guard
// records it: written in the effect's group transaction (pending in its context), or by the trail
// after the effect committed (the records of concurrent requests in groups of their own).
type auditedRequest func(ctx context.Context, ledger *db.Ledger, trail *db.AuditTrail, i int64) error

// benchmarkAudited runs request from 64 goroutines on one hot account, its record written each of
// the ways side by side: none (the cost of the effect alone), the trail after the commit, and in the
// effect's transaction.
func benchmarkAudited(b *testing.B, request func(ctx context.Context, ledger *db.Ledger, i int64) error) {
	const concurrency = 64
	record := db.AuditRecord{KeyName: "product", Action: "POST /bench", AccountID: "acct_hot", Status: 201, Outcome: "ok"}
	ways := []struct {
		name string
		run  auditedRequest
	}{
		{"unaudited", func(ctx context.Context, ledger *db.Ledger, _ *db.AuditTrail, i int64) error {
			return request(ctx, ledger, i)
		}},
		{"trail-after-commit", func(ctx context.Context, ledger *db.Ledger, trail *db.AuditTrail, i int64) error {
			if err := request(ctx, ledger, i); err != nil {
				return err
			}
			return trail.Record(ctx, record)
		}},
		{"in-effect-tx", func(ctx context.Context, ledger *db.Ledger, _ *db.AuditTrail, i int64) error {
			ctx, pending := db.WithPendingAudit(ctx, record)
			if err := request(ctx, ledger, i); err != nil {
				return err
			}
			if !pending.Written() {
				return fmt.Errorf("request %d: its record was not written with its effect", i)
			}
			return nil
		}},
	}
	for _, w := range ways {
		b.Run(w.name, func(b *testing.B) {
			pool := dbtest.New(b)
			ledger := dbtest.Ledger(b, pool, db.LedgerConfig{Groups: db.GroupOptions{Window: 2 * time.Millisecond}})
			if _, err := ledger.CreateAccount(context.Background(), "acct_hot", "usd", 1<<40); err != nil {
				b.Fatal(err)
			}
			trail := db.NewAuditTrail(pool)
			var n atomic.Int64
			b.SetParallelism(max(1, concurrency/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := w.run(context.Background(), ledger, trail, n.Add(1)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// Adjustments of one hot account, grouped (db.Ledger.PostGrouped), with their records.
func BenchmarkPosterAudited(b *testing.B) {
	benchmarkAudited(b, func(ctx context.Context, ledger *db.Ledger, i int64) error {
		_, err := ledger.PostGrouped(ctx, db.Posting{AccountID: "acct_hot", Kind: db.KindAdjustment, Amount: 1,
			NoOverdraw: true, DedupeKey: fmt.Sprintf("api:acct_hot:%d", i)})
		return err
	})
}

// Hold authorisations of one hot account, grouped (db.Ledger.AuthoriseHoldGrouped), with their records.
func BenchmarkHoldsAudited(b *testing.B) {
	benchmarkAudited(b, func(ctx context.Context, ledger *db.Ledger, i int64) error {
		_, err := ledger.AuthoriseHoldGrouped(ctx, "acct_hot", db.HoldRequest{ID: fmt.Sprintf("h%d", i), Amount: 1, ExpiresIn: time.Hour})
		return err
	})
}
