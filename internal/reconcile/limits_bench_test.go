package reconcile_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/reconcile"
)

// limitsBenchDecisions is the size of BenchmarkBillingLimits' pass: a fifth of BenchmarkBilling's, so
// that both of its passes take less than one of those.
const limitsBenchDecisions = 200_000

// Billing rate of a first pass over 200,000 decisions over 1,000 accounts, each decision naming a
// subject and a feature, with three spend limits on every account (one per scope, all applying to
// every decision: each chunk also counts its decisions in their windows, set-based) and without any.
func BenchmarkBillingLimits(b *testing.B) {
	for _, limits := range []int{0, 3} {
		b.Run(fmt.Sprintf("accounts=1000/limits=%d", limits), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				pool := dbtest.New(b)
				seedAccounts(b, pool, 1000)
				seedDecisions(b, pool, 1, limitsBenchDecisions, 1000)
				seedLimits(b, pool, limits > 0)
				b.StartTimer()
				rep, err := reconcile.New(reconcile.Deps{Pool: pool, Ledger: dbtest.Ledger(b, pool)}, reconcile.Options{}).Bill(context.Background(), 0)
				b.StopTimer()
				if err != nil || rep.Billed != limitsBenchDecisions {
					b.Fatalf("billed %+v, %v; want %d decisions", rep, err, limitsBenchDecisions)
				}
				pool.Close()
			}
			b.ReportMetric(float64(limitsBenchDecisions*b.N)/b.Elapsed().Seconds(), "decisions/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// seedLimits names a subject and a feature on every decision and, with limits, gives every account a
// day's cap on the account, a week's on that subject and a month's on that feature, none reached.
func seedLimits(tb testing.TB, pool *pgxpool.Pool, limits bool) {
	tb.Helper()
	stmts := []string{`UPDATE decisions SET subject = 'agent-1', feature = 'search'`}
	if limits {
		stmts = append(stmts, `INSERT INTO spend_limits (account_id, id, scope, scope_value, period, amount, mode)
			SELECT a.id, l.id, l.scope, l.scope_value, l.period, 1000000000000000, 'hard'
			FROM accounts a
			CROSS JOIN (VALUES ('daily', 'account', NULL, 'day'), ('agent', 'subject', 'agent-1', 'week'),
			                   ('search', 'feature', 'search', 'month')) AS l (id, scope, scope_value, period)`)
	}
	stmts = append(stmts, `VACUUM ANALYZE decisions`, `VACUUM ANALYZE spend_limits`)
	for _, stmt := range stmts {
		if _, err := pool.Exec(context.Background(), stmt); err != nil {
			tb.Fatalf("seed limits: %v", err)
		}
	}
}
