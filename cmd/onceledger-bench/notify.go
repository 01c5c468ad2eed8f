package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// notifications measures what users who set NOTIFY_URL pay: a second server process, on the same
// database, with NOTIFY_URL pointing at a local sink that answers every notification 204. Each of its
// entries then also inserts River's job in the entry's transaction, and its worker delivers them while
// the load runs. The webhook (c=32) and hot postings through the API (c=64) run on the server without
// notifications, then on this one; each row with notifications is compared with the row just before.
func (b *bench) notifications(ctx context.Context, d time.Duration, accounts int) {
	var delivered atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.rows = append(b.rows, row{result: result{workload: "notifications on", errors: 1, firstErr: err.Error()}})
		return
	}
	sink := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		delivered.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = sink.Serve(ln) }()
	defer sink.Close()

	notifying, err := startServer(ctx, b.o.bin, append(b.env, "NOTIFY_URL=http://"+ln.Addr().String()+"/notify", "NOTIFY_SECRET=bench_notify_secret"))
	if err != nil {
		b.rows = append(b.rows, row{result: result{workload: "notifications on", errors: 1, firstErr: err.Error()}})
		return
	}
	defer func() {
		if err := notifying.stop(); err != nil && !errors.Is(err, context.Canceled) {
			b.rows = append(b.rows, row{result: result{workload: "notifications on", errors: 1, firstErr: "server did not stop cleanly: " + err.Error()}})
		}
	}()
	notified := newClient(notifying.base)
	note := "ratio vs the row above, the same workload on a server without NOTIFY_URL"

	off := measure(ctx, "webhook cold, notifications off", 32, d, func(ctx context.Context, i int) ([]time.Duration, error) {
		return timed(func() error { return b.http.deliver(ctx, newTopupEvent("noff", i, accounts)) })
	})
	on := measure(ctx, "webhook cold, notifications on", 32, d, func(ctx context.Context, i int) ([]time.Duration, error) {
		return timed(func() error { return notified.deliver(ctx, newTopupEvent("non", i, accounts)) })
	})
	b.add(off, nil)
	b.rows = append(b.rows, row{result: on, baseline: &off, note: note})

	postOff := measure(ctx, "postings hot, API, notifications off", 64, d, func(ctx context.Context, i int) ([]time.Duration, error) {
		return timed(func() error { return b.http.adjust(ctx, "bench_hot_notify_off", strconv.Itoa(i)) })
	})
	postOn := measure(ctx, "postings hot, API, notifications on", 64, d, func(ctx context.Context, i int) ([]time.Duration, error) {
		return timed(func() error { return notified.adjust(ctx, "bench_hot_notify_on", strconv.Itoa(i)) })
	})
	b.add(postOff, nil)
	b.rows = append(b.rows, row{result: postOn, baseline: &postOff, note: fmt.Sprintf("%s; %d notifications delivered to the sink by the end", note, delivered.Load())})
}
