package main

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// result is one measured workload at one concurrency.
type result struct {
	workload    string
	concurrency int
	ops         int // requests that succeeded
	errors      int
	firstErr    string
	elapsed     time.Duration
	p50, p99    time.Duration
	rate        float64 // ops/s when measured elsewhere (the reconciler's benchmark), else zero
}

func (r result) opsPerSecond() float64 {
	if r.rate > 0 {
		return r.rate
	}
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ops) / r.elapsed.Seconds()
}

// op performs operation number i (unique within one workload) and returns the latency of each
// request it made: a pair of deliveries makes two.
type op func(ctx context.Context, i int) (latencies []time.Duration, err error)

// measure runs op from concurrency workers in a closed loop until the duration is over, and reports
// the throughput and latency percentiles of the successful requests.
func measure(ctx context.Context, name string, concurrency int, duration time.Duration, do op) result {
	var (
		next     atomic.Int64
		mu       sync.Mutex
		all      []time.Duration
		failures int
		firstErr string
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(duration)
	start := time.Now()
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			var myFailures int
			var myErr string
			for time.Now().Before(deadline) && ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				lat, err := do(ctx, i)
				if err != nil {
					myFailures++
					if myErr == "" {
						myErr = err.Error()
					}
					continue
				}
				mine = append(mine, lat...)
			}
			mu.Lock()
			defer mu.Unlock()
			all = append(all, mine...)
			failures += myFailures
			if firstErr == "" {
				firstErr = myErr
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(all)
	return result{
		workload: name, concurrency: concurrency, ops: len(all), errors: failures, firstErr: firstErr,
		elapsed: elapsed, p50: percentile(all, 0.50), p99: percentile(all, 0.99),
	}
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// timed runs fn and returns its latency as a one-operation op result.
func timed(fn func() error) ([]time.Duration, error) {
	start := time.Now()
	if err := fn(); err != nil {
		return nil, err
	}
	return []time.Duration{time.Since(start)}, nil
}
