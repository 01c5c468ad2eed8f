package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/onceledger/onceledger/client"
)

// The retry policy, against a stand-in that answers each attempt as told. What the real server does
// with the retried calls (a replay, the money moved once) is tested end to end in cmd/onceledger.

// standIn answers the i-th request with answers[i] (the last one after that) and records each
// request's headers.
type standIn struct {
	mu      sync.Mutex
	answers []func(http.ResponseWriter)
	seen    []http.Header
}

func (s *standIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.seen = append(s.seen, r.Header.Clone())
	answer := s.answers[min(len(s.seen), len(s.answers))-1]
	s.mu.Unlock()
	answer(w)
}

func (s *standIn) requests() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen
}

func status(code int, header, body string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		if header != "" {
			w.Header().Set("Retry-After", header)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}
}

// hangUp closes the connection without an answer.
func hangUp(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

const (
	held        = `{"hold":{"id":"h1","account_id":"a1","amount":40,"status":"held","captured_amount":null,"expires_at":"2026-01-01T00:15:00Z","created_at":"2026-01-01T00:00:00Z","resolved_at":null}}`
	unavailable = `{"ok":false,"error":{"code":"unavailable","message":"database unavailable"}}`
)

func start(t *testing.T, answers ...func(http.ResponseWriter)) (*standIn, *client.ClientWithResponses) {
	t.Helper()
	s := &standIn{answers: answers}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	c, err := client.New(ts.URL, "key_1", client.WithRetries(4, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func postHold(ctx context.Context, c *client.ClientWithResponses) (*client.PostHoldResponse, error) {
	return c.PostHoldWithResponse(ctx, "a1", client.PostHoldJSONRequestBody{ID: "h1", Amount: 40})
}

func TestRetriesWhatSaysTryAgainWithTheSameKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		first func(http.ResponseWriter)
	}{
		{"503", status(http.StatusServiceUnavailable, "", unavailable)},
		{"429 with Retry-After 0", status(http.StatusTooManyRequests, "0", `{"ok":false,"error":{"code":"rate_limited","message":"slow down"}}`)},
		{"a lost connection", hangUp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, c := start(t, tc.first, status(http.StatusCreated, "", held))
			res, err := postHold(context.Background(), c)
			if err != nil || res.JSON201 == nil || res.JSON201.Hold.ID != "h1" {
				t.Fatalf("got %+v, %v; want the hold, created", res, err)
			}
			seen := s.requests()
			if len(seen) != 2 {
				t.Fatalf("%d requests, want 2", len(seen))
			}
			key := seen[0].Get("Idempotency-Key")
			if key == "" || seen[1].Get("Idempotency-Key") != key {
				t.Fatalf("Idempotency-Keys %q then %q, want one key, twice", key, seen[1].Get("Idempotency-Key"))
			}
			for _, h := range seen {
				if h.Get("Authorization") != "Bearer key_1" {
					t.Fatalf("Authorization %q, want the bearer key", h.Get("Authorization"))
				}
			}
		})
	}
}

func TestAnswersOtherRefusalsAtOnceAsAPIErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		answer func(http.ResponseWriter)
		want   client.APIError
	}{
		{"409", status(http.StatusConflict, "", `{"ok":false,"error":{"code":"insufficient_balance","message":"insufficient balance"}}`),
			client.APIError{StatusCode: 409, Code: "insufficient_balance", Message: "insufficient balance"}},
		{"400", status(http.StatusBadRequest, "", `{"ok":false,"error":{"code":"invalid_amount","message":"amount must be positive"}}`),
			client.APIError{StatusCode: 400, Code: "invalid_amount", Message: "amount must be positive"}},
		{"500", status(http.StatusInternalServerError, "", `{"ok":false,"error":{"code":"internal","message":"internal error"}}`),
			client.APIError{StatusCode: 500, Code: "internal", Message: "internal error"}},
		{"a proxy's 502 page", status(http.StatusBadGateway, "", "<html>bad gateway</html>"),
			client.APIError{StatusCode: 502, Message: "<html>bad gateway</html>"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, c := start(t, tc.answer, status(http.StatusCreated, "", held))
			res, err := postHold(context.Background(), c)
			var apiErr *client.APIError
			if !errors.As(err, &apiErr) || *apiErr != tc.want {
				t.Fatalf("got %+v, %v; want %+v", res, err, tc.want)
			}
			if n := len(s.requests()); n != 1 {
				t.Fatalf("%d requests, want 1: never retried", n)
			}
		})
	}
}

func TestGivesUpAfterTheLastAttempt(t *testing.T) {
	t.Parallel()
	s, c := start(t, status(http.StatusServiceUnavailable, "", unavailable))
	_, err := postHold(context.Background(), c)
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable || apiErr.Code != "unavailable" {
		t.Fatalf("got %v, want the last 503 as an APIError", err)
	}
	if n := len(s.requests()); n != 4 {
		t.Fatalf("%d requests, want the 4 attempts", n)
	}
}

// A Retry-After beyond the caller's deadline is not slept through: the refusal comes back at once.
func TestRetryAfterBeyondTheDeadlineAnswersNow(t *testing.T) {
	t.Parallel()
	s, c := start(t, status(http.StatusTooManyRequests, "3600", `{"ok":false,"error":{"code":"rate_limited","message":"slow down"}}`),
		status(http.StatusCreated, "", held))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := postHold(ctx, c)
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || ctx.Err() != nil {
		t.Fatalf("got %v (context: %v), want the 429 before the deadline", err, ctx.Err())
	}
	if n := len(s.requests()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

// Reads carry no Idempotency-Key; a key the caller gives is the one sent.
func TestIdempotencyKeys(t *testing.T) {
	t.Parallel()
	s, c := start(t, status(http.StatusCreated, "", `{"posted":true,"entry":{"id":1,"account_id":"a1","kind":"adjustment","amount":5,"description":"","dedupe_key":"api:a1:mine","payment_intent":null,"created_at":"2026-01-01T00:00:00Z","seq":1,"balance_after":5}}`))
	ctx := context.Background()
	if _, err := c.PostAdjustmentWithResponse(ctx, "a1", &client.PostAdjustmentParams{IdempotencyKey: "mine"}, client.PostAdjustmentJSONRequestBody{Amount: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetHoldWithResponse(ctx, "a1", "h1"); err != nil {
		t.Fatal(err)
	}
	seen := s.requests()
	if got := seen[0].Get("Idempotency-Key"); got != "mine" {
		t.Fatalf("adjustment sent Idempotency-Key %q, want the caller's", got)
	}
	if _, ok := seen[1]["Idempotency-Key"]; ok {
		t.Fatalf("a GET sent Idempotency-Key %q", seen[1].Get("Idempotency-Key"))
	}
}
