package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

// BenchmarkLiabilityReport computes the liability report over 1,000,000 recognitions (a thousand accounts,
// a thousand movements each): the aggregation runs in the database, so the memory and allocations of one
// report (-benchmem) are those of its handful of lines, whatever the number of rows.
func BenchmarkLiabilityReport(b *testing.B) {
	ctx := context.Background()
	pool := dbtest.New(b)
	_, err := pool.Exec(ctx, `
		INSERT INTO accounts (id, currency) SELECT 'acct_' || a, 'usd' FROM generate_series(1, 1000) AS a;
		INSERT INTO credit_lots (account_id, entry_id, category, amount, remaining, cost_amount, cost_currency)
		SELECT 'acct_' || a, a, 'paid', 1000000, 0, 500000, 'usd' FROM generate_series(1, 1000) AS a;
		INSERT INTO revenue_recognitions (account_id, lot_id, entry_id, posting_entry_id, kind, credits, drawn_after, amount, currency, created_at)
		SELECT l.account_id, l.id, m, m, 'recognised', 1000, 1000 * m, 500, 'usd', now() - make_interval(secs => m)
		FROM credit_lots l, generate_series(1, 1000) AS m;
		ANALYZE`)
	if err != nil {
		b.Fatal(err)
	}
	from, to := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		report, err := db.LiabilityReportOf(ctx, pool, from, to)
		if err != nil {
			b.Fatal(err)
		}
		if got := report.Currencies[0].Line("recognised").Amount; got != 500*1000*1000 {
			b.Fatalf("recognised %d over the million rows, want %d", got, 500*1000*1000)
		}
	}
}
