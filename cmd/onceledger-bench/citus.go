package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/reconcile"
)

// billingPass measures, on either backend (-citus runs it on both), one first billing pass of the
// reconciler over decisions spread over 1,000 of the seeded accounts, stored through the intake's
// statement: 100,000 of them (5,000 with -quick).
func (b *bench) billingPass(ctx context.Context) {
	decisions := 100_000
	if b.o.quick {
		decisions = 5_000
	}
	r := result{workload: "billing, 1,000 accounts (one reconciler pass)", concurrency: 1}
	var err error
	batch := make([]db.Decision, 0, 10_000)
	for g := 1; g <= decisions && err == nil; g++ {
		batch = append(batch, db.Decision{
			ID: fmt.Sprintf("bench_dec_%d", g), AccountID: fmt.Sprintf("bench_%05d", g%1000), Cost: int64(g%7 + 1), OccurredAt: time.Now(),
		})
		if len(batch) == cap(batch) || g == decisions {
			_, err = db.StoreDecisions(ctx, b.pool, batch)
			batch = batch[:0]
		}
	}
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
	b.rows = append(b.rows, row{result: r, note: "decisions/s"})
}

// printBackends prints the rows of the same workloads measured on plain PostgreSQL and on the Citus
// cluster side by side, with the cluster's throughput as a share of plain PostgreSQL's.
func printBackends(w io.Writer, plain, cluster *bench) {
	t := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(t, "workload\tc\tplain ops/s\tplain p50\tCitus ops/s\tCitus p50\tCitus ÷ plain\terrors (plain, Citus)\t")
	// Paired by workload and concurrency, not by position: a workload that failed to start on one
	// backend has one error row there instead of a row per concurrency.
	type key struct {
		workload    string
		concurrency int
	}
	measured := map[key]row{}
	for _, c := range cluster.rows {
		measured[key{c.workload, c.concurrency}] = c
	}
	var notes []string
	for _, p := range plain.rows {
		c, ok := measured[key{p.workload, p.concurrency}]
		if !ok {
			notes = append(notes, fmt.Sprintf("%s c=%d: not measured on Citus", p.workload, p.concurrency))
			continue
		}
		ratio := "-"
		if base, own := p.opsPerSecond(), c.opsPerSecond(); base > 0 && own > 0 {
			ratio = fmt.Sprintf("%.2f×", own/base)
		}
		fmt.Fprintf(t, "%s\t%d\t%.0f\t%s\t%.0f\t%s\t%s\t%d, %d\t\n", p.workload, p.concurrency, p.opsPerSecond(), ms(p.p50),
			c.opsPerSecond(), ms(c.p50), ratio, p.errors, c.errors)
		for _, run := range []struct {
			backend string
			r       row
		}{{"plain", p}, {"Citus", c}} {
			if run.r.errors > 0 {
				notes = append(notes, fmt.Sprintf("%s c=%d on %s: %d errors, first: %s", run.r.workload, run.r.concurrency, run.backend,
					run.r.errors, clip(run.r.firstErr, 160)))
			}
		}
	}
	t.Flush()
	fmt.Fprintln(w, "\nCitus ÷ plain: the cluster's ops/s over plain PostgreSQL's, same workload, same concurrency, one run.")
	for _, n := range notes {
		fmt.Fprintln(w, "  "+n)
	}
	fmt.Fprintln(w, "\nplain "+plain.serverLine)
	fmt.Fprintln(w, "Citus "+cluster.serverLine)
}
