package reconcile_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/reconcile"
)

// Billing rate of a first pass over 1,000,000 decisions over 1,000 accounts that each name a hold of
// their account, still held: every chunk also captures its holds and releases their reservations.
// Compare with BenchmarkBilling/accounts=1000/reconciler.
func BenchmarkBillingHolds(b *testing.B) {
	b.Run("accounts=1000/reconciler", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			pool := dbtest.New(b)
			seedAccounts(b, pool, 1000)
			seedDecisions(b, pool, 1, benchDecisions, 1000)
			seedHolds(b, pool)
			b.StartTimer()
			rep, err := reconcile.New(reconcile.Deps{Pool: pool, Ledger: dbtest.Ledger(b, pool)}, reconcile.Options{}).Bill(context.Background(), 0)
			b.StopTimer()
			if err != nil || rep.Billed != benchDecisions || rep.HoldsCaptured != benchDecisions {
				b.Fatalf("billed %+v, %v; want %d decisions and holds", rep, err, benchDecisions)
			}
			pool.Close()
		}
		b.ReportMetric(float64(benchDecisions*b.N)/b.Elapsed().Seconds(), "decisions/s")
		b.ReportMetric(0, "ns/op")
	})
}

// seedHolds gives every decision dec_{g} a hold h_{g} of 10 on its account, held, set-based.
func seedHolds(tb testing.TB, pool *pgxpool.Pool) {
	tb.Helper()
	ctx := context.Background()
	for _, stmt := range []string{
		// Authorised before the decisions were received, as in real life: a decision captures a hold
		// only when it was received while the hold was live.
		`INSERT INTO holds (account_id, id, amount, created_at, expires_at)
		 SELECT account_id, 'h_' || substr(id, 5), 10, now() - interval '1 hour', now() + interval '1 hour' FROM decisions`,
		`UPDATE decisions SET hold_id = 'h_' || substr(id, 5)`,
		`UPDATE accounts a SET held = h.total
		 FROM (SELECT account_id, sum(amount) AS total FROM holds GROUP BY account_id) h WHERE h.account_id = a.id`,
		`VACUUM ANALYZE decisions`,
		`VACUUM ANALYZE holds`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			tb.Fatalf("seed holds: %v", err)
		}
	}
}
