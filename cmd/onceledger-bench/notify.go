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
	b.compareServers(ctx, d, accounts, "notifications", "without NOTIFY_URL", func(sink string) []string {
		return []string{"NOTIFY_URL=" + sink + "/notify", "NOTIFY_SECRET=bench_notify_secret"}
	}, "notifications delivered")
}

// tracing measures what users who turn OpenTelemetry tracing on pay, every request sampled: a second
// server exporting its spans (OTLP over HTTP) to a local sink that answers every export 200, compared
// as notifications are. The server without the variables traces nothing: its rows are tracing off.
func (b *bench) tracing(ctx context.Context, d time.Duration, accounts int) {
	b.compareServers(ctx, d, accounts, "tracing", "without OTEL_EXPORTER_OTLP_ENDPOINT", func(sink string) []string {
		return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + sink, "OTEL_TRACES_SAMPLER=always_on", "OTEL_SERVICE_NAME=onceledger-bench"}
	}, "span exports received")
}

// compareServers runs the webhook (c=32) and hot postings through the API (c=64) on the bench's server
// ("<feature> off"), then on a second server on the same database whose environment adds with(sink),
// sink being the URL of a local server that answers every request and counts them ("<feature> on");
// each "on" row is compared with the "off" row just before it.
func (b *bench) compareServers(ctx context.Context, d time.Duration, accounts int, feature, without string,
	with func(sink string) []string, received string) {
	failed := func(err error) {
		b.rows = append(b.rows, row{result: result{workload: feature + " on", errors: 1, firstErr: err.Error()}})
	}
	var count atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		failed(err)
		return
	}
	sink := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		count.Add(1)
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			w.WriteHeader(http.StatusOK) // an empty OTLP export response
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = sink.Serve(ln) }()
	defer sink.Close()

	second, err := startServer(ctx, b.o.bin, append(b.env, with("http://"+ln.Addr().String())...))
	if err != nil {
		failed(err)
		return
	}
	defer func() {
		if err := second.stop(); err != nil && !errors.Is(err, context.Canceled) {
			failed(errors.New("server did not stop cleanly: " + err.Error()))
		}
	}()
	client := newClient(second.base)
	note := "ratio vs the row above, the same workload on a server " + without
	tag := feature[:1]

	off := measure(ctx, "webhook cold, "+feature+" off", 32, d, func(ctx context.Context, i int) ([]time.Duration, error) {
		return timed(func() error { return b.http.deliver(ctx, newTopupEvent(tag+"off", i, accounts)) })
	})
	on := measure(ctx, "webhook cold, "+feature+" on", 32, d, func(ctx context.Context, i int) ([]time.Duration, error) {
		return timed(func() error { return client.deliver(ctx, newTopupEvent(tag+"on", i, accounts)) })
	})
	b.add(off, nil)
	b.rows = append(b.rows, row{result: on, baseline: &off, note: note})

	postOff := measure(ctx, "postings hot, API, "+feature+" off", 64, d, func(ctx context.Context, i int) ([]time.Duration, error) {
		return timed(func() error { return b.http.adjust(ctx, "bench_hot_"+feature+"_off", strconv.Itoa(i)) })
	})
	postOn := measure(ctx, "postings hot, API, "+feature+" on", 64, d, func(ctx context.Context, i int) ([]time.Duration, error) {
		return timed(func() error { return client.adjust(ctx, "bench_hot_"+feature+"_on", strconv.Itoa(i)) })
	})
	b.add(postOff, nil)
	b.rows = append(b.rows, row{result: postOn, baseline: &postOff, note: fmt.Sprintf("%s; %d %s by the sink by the end", note, count.Load(), received)})
}
