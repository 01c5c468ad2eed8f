package tracing_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/onceledger/onceledger/internal/tracing"
)

func attributes(span sdktrace.ReadOnlySpan) map[attribute.Key]string {
	out := map[attribute.Key]string{}
	for _, kv := range span.Attributes() {
		out[kv.Key] = kv.Value.Emit()
	}
	return out
}

// A route's span is named by its pattern, and its path attribute is the pattern too: the ids in the
// path are never recorded.
func TestRouteSpanHoldsThePatternNotThePath(t *testing.T) {
	t.Parallel()
	tr, spans := recorded()
	h := tr.Route(http.MethodGet, "/v1/accounts/{id}", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/v1/accounts/acct_private_42?limit=7", nil))
	ended := spans.Ended()
	if len(ended) != 1 || ended[0].Name() != "GET /v1/accounts/{id}" {
		t.Fatalf("spans %v, want one named GET /v1/accounts/{id}", ended)
	}
	attrs := attributes(ended[0])
	if attrs["url.path"] != "/v1/accounts/{id}" || attrs["http.route"] != "/v1/accounts/{id}" {
		t.Errorf("url.path %q, http.route %q; want the pattern", attrs["url.path"], attrs["http.route"])
	}
	for k, v := range attrs {
		if strings.Contains(v, "acct_private_42") || strings.Contains(v, "limit") {
			t.Errorf("attribute %s=%q holds the request's path or query", k, v)
		}
	}
}

// A statement is named by its sqlc query, else by its first word; nothing else of the SQL.
func TestQueryName(t *testing.T) {
	t.Parallel()
	for sql, want := range map[string]string{
		"-- name: LedgerAppend :many\n-- appends\nSELECT 1":        "LedgerAppend",
		"-- name: JobGetAvailable :many\nWITH locked_jobs AS (…)":  "JobGetAvailable",
		"begin isolation level read committed":                     "BEGIN",
		"commit":                                                   "COMMIT",
		"SET LOCAL lock_timeout = 25":                              "SET",
		"  -- a comment first\n  select pg_advisory_xact_lock($1)": "SELECT",
		"select(1)": "SELECT",
		"":          "statement",
	} {
		if got := tracing.QueryName(sql); got != want {
			t.Errorf("QueryName(%q) = %q, want %q", sql, got, want)
		}
	}
}

// A statement's span holds its name, never its arguments; of a failure only its SQLSTATE, never the
// message, which may quote a row. A statement outside any traced request makes no span.
func TestStatementSpans(t *testing.T) {
	t.Parallel()
	tr, spans := recorded()
	ctx, span := tr.Statement(context.Background(), "-- name: Untraced :one\nSELECT $1", time.Time{})
	tracing.EndStatement(span, nil)
	if ctx != context.Background() || len(spans.Ended()) != 0 {
		t.Fatalf("a statement outside a request made %d spans", len(spans.Ended()))
	}
	ctx, request := tr.Start(context.Background(), "request")
	failure := &pgconn.PgError{Code: "23505", Message: `duplicate key value (dedupe_key)=(secret_arg)`}
	_, statement := tr.Statement(ctx, "-- name: LedgerEntryInsert :one\nINSERT …", time.Time{})
	tracing.EndStatement(statement, errors.Join(errors.New("wrapped"), failure))
	began := time.Now().Add(-time.Second)
	batchCtx, batch := tr.Batch(ctx, 2)
	_, queued := tr.Statement(batchCtx, "commit", began)
	tracing.EndStatement(queued, nil)
	tracing.EndStatement(batch, nil)
	request.End()

	ended := spans.Ended()
	if len(ended) != 4 || ended[0].Name() != "LedgerEntryInsert" || ended[1].Name() != "COMMIT" || ended[2].Name() != "batch" {
		t.Fatalf("spans %v, want LedgerEntryInsert, COMMIT, batch, request", ended)
	}
	if ended[0].Parent().SpanID() != request.SpanContext().SpanID() || ended[1].Parent().SpanID() != batch.SpanContext().SpanID() {
		t.Error("a statement's span is not the child of its request's, or of its batch's")
	}
	if !ended[1].StartTime().Equal(began) {
		t.Errorf("the batch's statement began at %v, want %v", ended[1].StartTime(), began)
	}
	if got := attributes(ended[0])["db.response.status_code"]; got != "23505" {
		t.Errorf("db.response.status_code = %q, want 23505", got)
	}
	for _, text := range append(spanValues(ended[0]), ended[0].Status().Description) {
		if strings.Contains(text, "secret_arg") || strings.Contains(text, "duplicate") {
			t.Errorf("the statement's span records %q", text)
		}
	}
}

func spanValues(span sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, v := range attributes(span) {
		out = append(out, v)
	}
	return out
}

// A Stripe call is a client span named by method and path without its ids, holding Stripe's
// Request-Id and status, never the query string or the key.
func TestStripeCallSpan(t *testing.T) {
	t.Parallel()
	stripeAPI := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Request-Id", "req_traced_1")
		w.WriteHeader(http.StatusOK)
	}))
	defer stripeAPI.Close()
	tr, spans := recorded()
	client := &http.Client{Transport: tr.Stripe(nil)}
	ctx, request := tr.Start(context.Background(), "request")
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, stripeAPI.URL+"/v1/checkout/sessions/cs_test_a1B2c3?expand[]=line_items", nil)
	req.Header.Set("Authorization", "Bearer sk_test_private")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	request.End()
	ended := spans.Ended()
	if len(ended) != 2 || ended[0].Name() != "Stripe GET /v1/checkout/sessions/{id}" {
		t.Fatalf("spans %v, want Stripe GET /v1/checkout/sessions/{id} then request", ended)
	}
	attrs := attributes(ended[0])
	if attrs["stripe.request_id"] != "req_traced_1" || attrs["http.response.status_code"] != "200" {
		t.Errorf("attributes %v, want the Request-Id and the status", attrs)
	}
	for k, v := range attrs {
		if strings.Contains(v, "cs_test_a1B2c3") || strings.Contains(v, "expand") || strings.Contains(v, "sk_test_private") {
			t.Errorf("attribute %s=%q holds the call's ids, query or key", k, v)
		}
	}
}

// A job's span is named by its kind; a failed job's span says that it failed, never its error's text,
// which River still gets, whole, to keep in the job's row.
func TestJobSpan(t *testing.T) {
	t.Parallel()
	tr, spans := recorded()
	middleware := tr.JobMiddleware()
	if len(middleware) != 1 {
		t.Fatalf("%d middlewares, want 1", len(middleware))
	}
	if _, ok := middleware[0].(rivertype.JobInsertMiddleware); !ok {
		t.Error("the middleware does not trace inserts")
	}
	work, ok := middleware[0].(rivertype.WorkerMiddleware)
	if !ok {
		t.Fatal("the middleware does not trace work")
	}
	failure := errors.New("POST https://notify.example/hook for evt_private_1: 500")
	err := work.Work(context.Background(), &rivertype.JobRow{ID: 1, Kind: "notify_entry", Queue: "notify"}, func(context.Context) error {
		return failure
	})
	if !errors.Is(err, failure) {
		t.Errorf("River got %v, want the job's own error", err)
	}
	ended := spans.Ended()
	if len(ended) != 1 || ended[0].Name() != "river.work/notify_entry" {
		t.Fatalf("spans %v, want river.work/notify_entry", ended)
	}
	for _, text := range append(spanValues(ended[0]), ended[0].Status().Description) {
		if strings.Contains(text, "evt_private_1") || strings.Contains(text, "notify.example") {
			t.Errorf("the job's span records %q", text)
		}
	}
}
