package tracing_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceledger/onceledger/internal/config"
	"github.com/onceledger/onceledger/internal/tracing"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// recorded is a Tracing whose spans the returned recorder sees once they end.
func recorded() (*tracing.Tracing, *tracetest.SpanRecorder) {
	spans := tracetest.NewSpanRecorder()
	return tracing.New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))), spans
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, spans reach the collector there (POST /v1/traces), at the
// latest when shutdown sends the last of them.
func TestSpansReachTheConfiguredCollector(t *testing.T) {
	t.Parallel()
	var posts atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			posts.Add(1)
		}
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer collector.Close()
	cfg, err := config.Load(func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL, "OTEL_SERVICE_NAME": "onceledger-test"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	tr, shutdown, err := tracing.Start(context.Background(), cfg.Tracing, "test", quiet())
	if err != nil || tr == nil {
		t.Fatalf("Start = %v, %v; want tracing on", tr, err)
	}
	_, span := tr.Start(context.Background(), "step")
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if posts.Load() == 0 {
		t.Fatal("the collector received no spans")
	}
}

// Unset, tracing is off: no exporter, no provider, and nothing wrapped: the router's handlers, the
// River client and the Stripe transport are what they are without tracing (and the pool gets no
// tracer: db.WithTracing).
func TestOffInstallsNothing(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(func(k string) string { return map[string]string{"OTEL_SERVICE_NAME": "onceledger"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	tr, shutdown, err := tracing.Start(context.Background(), cfg.Tracing, "test", quiet())
	if err != nil || tr != nil {
		t.Fatalf("Start = %v, %v; want nil (off)", tr, err)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := http.NewServeMux()
	if tr.Route(http.MethodGet, "/v1/accounts/{id}", h) != http.Handler(h) {
		t.Error("Route wrapped a handler with tracing off")
	}
	if tr.Stripe(nil) != nil || tr.Stripe(http.DefaultTransport) != http.DefaultTransport {
		t.Error("Stripe wrapped the transport with tracing off")
	}
	if tr.JobMiddleware() != nil {
		t.Error("JobMiddleware returned middleware with tracing off")
	}
}

// Off, a step, a group commit and a statement cost no allocation: the hot path pays nothing for tracing. Not
// parallel: AllocsPerRun counts the allocations of the whole process.
func TestOffCostsNoAllocation(t *testing.T) {
	var tr *tracing.Tracing
	ctx := context.Background()
	member := func(int) context.Context { return ctx }
	allocs := testing.AllocsPerRun(100, func() {
		c, span := tr.Start(ctx, "step")
		span.End()
		c, span = tr.Group(c, "group", 3, member)
		span.End()
		_, span = tr.Statement(c, "commit", time.Time{})
		tracing.EndStatement(span, nil)
	})
	if allocs != 0 {
		t.Errorf("a step and a group cost %v allocations with tracing off, want 0", allocs)
	}
}

// A group of one is its member's child; a larger group is a root of its own, linked to each member.
func TestGroupLinksItsMembers(t *testing.T) {
	t.Parallel()
	tr, spans := recorded()
	var members []context.Context
	for range 3 {
		ctx, span := tr.Start(context.Background(), "request")
		defer span.End()
		members = append(members, ctx)
	}
	_, alone := tr.Group(context.Background(), "group_commit.test", 1, func(int) context.Context { return members[0] })
	alone.End()
	_, group := tr.Group(context.Background(), "group_commit.test", 3, func(i int) context.Context { return members[i] })
	group.End()

	ended := spans.Ended()
	if len(ended) != 2 {
		t.Fatalf("%d spans ended, want 2", len(ended))
	}
	first := ended[0]
	if first.Parent().SpanID() != trace.SpanContextFromContext(members[0]).SpanID() || first.SpanContext().TraceID() != trace.SpanContextFromContext(members[0]).TraceID() {
		t.Error("a group of one is not its member's child")
	}
	second := ended[1]
	if second.Parent().IsValid() {
		t.Error("a group of three has a parent, want a root")
	}
	var linked []string
	for _, l := range second.Links() {
		linked = append(linked, l.SpanContext.SpanID().String())
	}
	for _, m := range members {
		if !slices.Contains(linked, trace.SpanContextFromContext(m).SpanID().String()) {
			t.Errorf("the group's span links %v, not member %s", linked, trace.SpanContextFromContext(m).SpanID())
		}
	}
}

// A group of requests none of which is traced (a reconciler's pass) makes no span.
func TestUntracedGroupMakesNoSpan(t *testing.T) {
	t.Parallel()
	tr, spans := recorded()
	_, span := tr.Group(context.Background(), "group_commit.test", 2, func(int) context.Context { return context.Background() })
	span.End()
	if n := len(spans.Ended()); n != 0 {
		t.Errorf("an untraced group made %d spans", n)
	}
}
