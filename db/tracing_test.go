package db_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/tracing"
)

// Concurrent first deliveries committed as one group: the group's span is a trace of its own, linked
// to the span of each delivery, and the group's statements are in its trace. The first delivery,
// made outside any traced request, leaves no span.
func TestCheckoutGroupSpanLinksEachDelivery(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	tr := tracing.New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	pool, err := db.Open(context.Background(), dbtest.URL(t), db.WithTracing(tr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	g := dbtest.Ledger(t, pool, db.LedgerConfig{GroupCheckouts: true, Tracing: tr})
	var (
		payments   []db.CheckoutPayment
		ctxs       []context.Context
		deliveries []trace.Span
	)
	for i := range 3 {
		account := fmt.Sprintf("acct_span_%d", i)
		newAccount(t, pool, account)
		payments = append(payments, checkoutPayment(fmt.Sprintf("evt_span_%d", i), "cs_"+account, "pi_"+account, account, 100))
		ctx, span := tr.Start(context.Background(), "delivery")
		ctxs, deliveries = append(ctxs, ctx), append(deliveries, span)
	}
	for i, a := range startOneGroupIn(t, pool, g, payments, ctxs)() {
		if a.err != nil || a.paid != db.CheckoutCredited {
			t.Fatalf("payment %d: %v %v", i, a.paid, a.err)
		}
		deliveries[i].End()
	}

	// The group's span ends once every member was answered.
	var ended []sdktrace.ReadOnlySpan
	i := -1
	waitFor(t, "the group's span ends", func() bool {
		ended = spans.Ended()
		i = slices.IndexFunc(ended, func(s sdktrace.ReadOnlySpan) bool { return s.Name() == "group_commit.checkouts" })
		return i >= 0
	})
	group := ended[i]
	if group.Parent().IsValid() || !slices.Contains(group.Attributes(), attribute.Int("onceledger.group.size", 3)) {
		t.Errorf("the group's span: parent %v, attributes %v; want a root of a group of 3", group.Parent(), group.Attributes())
	}
	var linked []trace.SpanID
	for _, l := range group.Links() {
		linked = append(linked, l.SpanContext.SpanID())
	}
	for i, d := range deliveries {
		if !slices.Contains(linked, d.SpanContext().SpanID()) {
			t.Errorf("the group's span does not link delivery %d", i)
		}
	}
	var inGroup []string
	for _, s := range ended {
		if s.SpanContext().TraceID() == group.SpanContext().TraceID() {
			inGroup = append(inGroup, s.Name())
		}
	}
	for _, want := range []string{"batch", "StripeEventsInsertGroup", "TopupsPay", "LedgerAppend", "COMMIT"} {
		if !slices.Contains(inGroup, want) {
			t.Errorf("no %s in the group's trace: %v", want, inGroup)
		}
	}
	if n := len(ended) - len(inGroup) - len(deliveries); n != 0 {
		t.Errorf("%d spans outside the group's trace and the deliveries", n)
	}
}

// Tracing off, the pool has no tracer: pgx does no tracing work at all.
func TestWithoutTracingThePoolHasNoTracer(t *testing.T) {
	t.Parallel()
	pool, err := db.Open(context.Background(), dbtest.URL(t), db.WithTracing(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if tracer := pool.Config().ConnConfig.Tracer; tracer != nil {
		t.Errorf("the pool has a tracer with tracing off: %T", tracer)
	}
}
