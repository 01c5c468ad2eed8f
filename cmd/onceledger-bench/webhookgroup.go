package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// webhookGroupSamples is how many times each row of the webhook-group family runs, off and on
// alternating: its row is the median, since one sample moves with whatever else the machine does.
const webhookGroupSamples = 3

// webhookGroupCommit measures group commit across webhook deliveries as users get it: signed first
// deliveries of paid Checkout Sessions (new sessions, accounts round-robin) through the bench's server,
// where WEBHOOK_GROUP_COMMIT is on (the default), and through a second server process on the same
// database with WEBHOOK_GROUP_COMMIT=off, where each delivery is its own transaction (the happy path in
// three round trips). At each concurrency, off and on alternate; each row is the median of its samples,
// and on is compared with off.
func (b *bench) webhookGroupCommit(ctx context.Context, d time.Duration, accounts int) {
	fail := func(err error) {
		b.rows = append(b.rows, row{result: result{workload: "webhook group commit", errors: 1, firstErr: err.Error()}})
	}
	alone, err := startServer(ctx, b.o.bin, append(slices.Clone(b.env), "WEBHOOK_GROUP_COMMIT=off"))
	if err != nil {
		fail(err)
		return
	}
	defer func() {
		if err := alone.stop(); err != nil && !errors.Is(err, context.Canceled) {
			fail(fmt.Errorf("server did not stop cleanly: %w", err))
		}
	}()
	aloneClient := newClient(alone.base)
	for _, c := range []int{32, 64} {
		var off, on []result
		for s := range webhookGroupSamples {
			run := fmt.Sprintf("c%d-%d", c, s)
			off = append(off, measure(ctx, "webhook cold, WEBHOOK_GROUP_COMMIT=off", c, d, func(ctx context.Context, i int) ([]time.Duration, error) {
				return timed(func() error { return aloneClient.deliver(ctx, newTopupEvent("goff"+run, i, accounts)) })
			}))
			on = append(on, measure(ctx, "webhook cold, group commit (WEBHOOK_GROUP_COMMIT=on, the default)", c, d, func(ctx context.Context, i int) ([]time.Duration, error) {
				return timed(func() error { return b.http.deliver(ctx, newTopupEvent("gon"+run, i, accounts)) })
			}))
		}
		base := medianResult(off)
		b.add(base, nil)
		b.rows = append(b.rows, row{result: medianResult(on), baseline: &base,
			note: fmt.Sprintf("median of %d samples each, off and on alternating; the goal is ≥ 1.5× at c=32", webhookGroupSamples)})
	}
}

// medianResult is the sample of median ops/s, with its own latencies; errors are summed over all.
func medianResult(samples []result) result {
	sorted := slices.SortedFunc(slices.Values(samples), func(a, b result) int {
		switch x, y := a.opsPerSecond(), b.opsPerSecond(); {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	m := sorted[(len(sorted)-1)/2]
	m.errors = 0
	for _, s := range samples {
		m.errors += s.errors
		if m.firstErr == "" {
			m.firstErr = s.firstErr
		}
	}
	return m
}
