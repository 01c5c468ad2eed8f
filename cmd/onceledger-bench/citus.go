package main

import (
	"context"
	"time"

	"github.com/onceledger/onceledger/internal/reconcile"
)

// billingCluster measures, on the Citus cluster (-citus), one first billing pass of the reconciler over
// decisions spread over 1,000 of the seeded accounts: 100,000 of them (5,000 with -quick), fewer than the
// million of the plain run's benchmark, as the cluster bills an account at a time (db/citus_ledger.go).
func (b *bench) billingCluster(ctx context.Context) {
	decisions := 100_000
	if b.o.quick {
		decisions = 5_000
	}
	r := result{workload: "billing, 1,000 accounts (Citus cluster)", concurrency: 1}
	_, err := b.pool.Exec(ctx, `
		INSERT INTO decisions (id, account_id, cost)
		SELECT 'bench_dec_' || g, 'bench_' || lpad((g % 1000)::text, 5, '0'), g % 7 + 1
		FROM generate_series(1, $1::int) g`, decisions)
	if err == nil {
		start := time.Now()
		var rep reconcile.BillReport
		rep, err = reconcile.New(reconcile.Deps{Pool: b.pool, Ledger: b.ledger}, reconcile.Options{}).Bill(ctx, 0)
		if err == nil {
			r.rate = float64(rep.Billed) / time.Since(start).Seconds()
		}
	}
	if err != nil {
		r.errors, r.firstErr = 1, err.Error()
	}
	b.rows = append(b.rows, row{result: r, note: "decisions/s; compare with the plain run's billing, 1,000 accounts"})
}
