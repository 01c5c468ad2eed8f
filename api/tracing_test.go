package api_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/access"
	"github.com/onceledger/onceledger/internal/config"
	"github.com/onceledger/onceledger/internal/stripefake"
	"github.com/onceledger/onceledger/internal/tracing"
)

// tracedAPIKey is the traced server's API key, which no span may hold.
const tracedAPIKey = "key_traced_secret_onceledger_0000"

// newTracedWebhookServer is newWebhookServer with everything traced into spans, as serve wires it
// when tracing is on: the pool's statements, the routes, the webhook's steps and the group commits.
func newTracedWebhookServer(t *testing.T, spans *tracetest.SpanRecorder) *webhookServer {
	t.Helper()
	tr := tracing.New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	pool, err := db.Open(context.Background(), dbtest.URL(t), db.WithTracing(tr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	keys, err := access.Parse([]string{tracedAPIKey})
	if err != nil {
		t.Fatal(err)
	}
	return newWebhookServerOn(t, pool, tr, func(c *config.Config) { c.APIKeys = keys })
}

// One delivery of a paid Checkout Session is one trace: the route's span, the webhook's steps and a
// span for each SQL statement, named by its sqlc query. No span holds a secret or a value of the
// event: not the webhook secret, the API key, the event's ids, its account or its amount.
func TestWebhookDeliveryIsOneTrace(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	s := newTracedWebhookServer(t, spans)
	s.createAccount("acct_traced", "gbp") // outside any request: not traced
	if reply := s.deliver(topupEvent("evt_traced_1", "cs_traced_1", "pi_traced_1", "acct_traced", 987654)); !reply.Credited {
		t.Fatalf("delivery not credited: %s", reply.raw)
	}
	s.wantBalance("acct_traced", 987654)

	ended := routeEnded(t, spans, "POST /webhooks/stripe")
	traces := map[trace.TraceID][]string{}
	for _, span := range ended {
		traces[span.SpanContext().TraceID()] = append(traces[span.SpanContext().TraceID()], span.Name())
	}
	if len(traces) != 1 {
		t.Fatalf("one delivery made %d traces, want 1: %v", len(traces), traces)
	}
	var names []string
	for _, n := range traces {
		names = n
	}
	for _, want := range []string{
		"POST /webhooks/stripe", "webhook.verify", "stripe_event.process", "stripe_event.pay_checkout",
		// The read before the transaction, then the transaction's statements, sent as one batch.
		"StripeEventsCheckoutState", "batch", "BEGIN", "StripeEventsInsert", "StripeEventsLockPayment", "TopupsPay",
		"StripeEventsParkedWaiting", "LedgerAppend", "COMMIT",
	} {
		if !slices.Contains(names, want) {
			t.Errorf("no span %q in the delivery's trace: %v", want, names)
		}
	}

	secrets := []string{testSecret, stripefake.SecretKey, tracedAPIKey, "evt_traced_1", "cs_traced_1", "pi_traced_1", "acct_traced", "987654"}
	for _, span := range ended {
		for _, text := range spanTexts(span) {
			for _, secret := range secrets {
				if strings.Contains(text, secret) {
					t.Errorf("span %q records %q: %s", span.Name(), secret, text)
				}
			}
		}
	}
}

// routeEnded waits for the span of route to end (the server ends it after the reply was sent) and
// returns every span ended by then.
func routeEnded(t *testing.T, spans *tracetest.SpanRecorder, route string) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ended := spans.Ended()
		if slices.ContainsFunc(ended, func(s sdktrace.ReadOnlySpan) bool { return s.Name() == route }) {
			return ended
		}
		if time.Now().After(deadline) {
			var names []string
			for _, s := range ended {
				names = append(names, s.Name())
			}
			t.Fatalf("no span %q ended, only %v", route, names)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// spanTexts is everything a span records as text: its name, status, attributes, its events' and
// links' attributes.
func spanTexts(span sdktrace.ReadOnlySpan) []string {
	texts := []string{span.Name(), span.Status().Description}
	for _, kv := range span.Attributes() {
		texts = append(texts, fmt.Sprintf("%s=%s", kv.Key, kv.Value.Emit()))
	}
	for _, e := range span.Events() {
		texts = append(texts, e.Name)
		for _, kv := range e.Attributes {
			texts = append(texts, fmt.Sprintf("%s=%s", kv.Key, kv.Value.Emit()))
		}
	}
	for _, l := range span.Links() {
		for _, kv := range l.Attributes {
			texts = append(texts, fmt.Sprintf("%s=%s", kv.Key, kv.Value.Emit()))
		}
	}
	return texts
}
