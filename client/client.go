// Package client is a typed Go client of the onceledger API.
//
// The types and methods are generated from api/openapi.yaml (onceledger.gen.go; `make generate`).
// New wraps them with what a generator does badly: the bearer API key, an Idempotency-Key on every
// mutating call, retries of the refusals that say "try again" (429, 503) and of lost connections, and
// every other refusal as an *APIError carrying the API's code.
//
//	c, err := client.New("http://127.0.0.1:8080", apiKey)
//	res, err := c.PostHoldWithResponse(ctx, "acct_1", client.PostHoldJSONRequestBody{ID: "job_42", Amount: 40})
//	var apiErr *client.APIError
//	if errors.As(err, &apiErr) && apiErr.Code == "insufficient_balance" { … }
package client

import (
	"context"
	"crypto/rand"
	"fmt"
	mathrand "math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// Defaults of New: four attempts in all, waiting about 0.25 s, 0.5 s, then 1 s between them.
const (
	defaultAttempts = 4
	defaultBackoff  = 250 * time.Millisecond
	// maxBackoff caps the doubling; a Retry-After the API sends is honoured whatever its length.
	maxBackoff = 10 * time.Second
	// defaultTimeout bounds each attempt when the caller brings no HTTP client of its own.
	defaultTimeout = 30 * time.Second
)

// New returns a client of the onceledger API at baseURL (e.g. "http://127.0.0.1:8080") that
// authenticates with apiKey, one of the server's ONCELEDGER_API_KEYS.
//
// Every POST and PUT carries an Idempotency-Key: the caller's when given (the Idempotency-Key of
// PostAdjustmentParams and PostTopupParams), else a fresh random one; a retry sends the same key, so
// the API answers it as a replay and the money moves once. A call is retried, with exponential backoff
// or after the Retry-After the API sends, when the API answers 429 or 503 or the connection fails,
// until the attempts run out or ctx ends. Any answer of 400 or more then comes back as an *APIError
// (the generated JSON4xx fields stay nil); other answers are never retried.
func New(baseURL, apiKey string, opts ...Option) (*ClientWithResponses, error) {
	t := &transport{
		apiKey:   apiKey,
		next:     &http.Client{Timeout: defaultTimeout},
		attempts: defaultAttempts,
		backoff:  defaultBackoff,
	}
	for _, opt := range opts {
		opt(t)
	}
	if t.attempts < 1 {
		return nil, fmt.Errorf("client: %d attempts: at least one is needed", t.attempts)
	}
	return NewClientWithResponses(baseURL, WithHTTPClient(t))
}

// Option configures New.
type Option func(*transport)

// WithDoer sends each attempt through d (an *http.Client with the caller's transport and timeouts),
// instead of an http.Client whose attempts time out after 30 s.
func WithDoer(d HttpRequestDoer) Option {
	return func(t *transport) { t.next = d }
}

// WithRetries makes a call at most attempts tries in all (1: never retried), waiting about backoff
// before the second and doubling each time after, up to 10 s.
func WithRetries(attempts int, backoff time.Duration) Option {
	return func(t *transport) { t.attempts, t.backoff = attempts, backoff }
}

// transport is the HttpRequestDoer the generated client sends its requests through.
type transport struct {
	apiKey   string
	next     HttpRequestDoer
	attempts int
	backoff  time.Duration
}

func (t *transport) Do(req *http.Request) (*http.Response, error) {
	req.Header.Set("Authorization", "Bearer "+t.apiKey)
	if req.Method != http.MethodGet && req.Method != http.MethodHead && req.Header.Get("Idempotency-Key") == "" {
		// Set once, before the first attempt, so that every retry of this call carries it.
		req.Header.Set("Idempotency-Key", rand.Text())
	}
	for attempt := 1; ; attempt++ {
		resp, err := t.next.Do(req)
		wait, retry := t.retryAfter(attempt, resp, err)
		if !retry || (req.Body != nil && req.GetBody == nil) { // a body that cannot be sent twice
			return answer(resp, err, attempt)
		}
		// Read the refusal now, freeing its connection during the wait, and answer it if the wait is cut.
		_, refusal := answer(resp, err, attempt)
		if !sleep(req.Context(), wait) {
			return nil, refusal
		}
		if req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
	}
}

// retryAfter says whether the outcome of an attempt is worth another, and how long to wait first.
func (t *transport) retryAfter(attempt int, resp *http.Response, err error) (time.Duration, bool) {
	if attempt >= t.attempts {
		return 0, false
	}
	if err == nil && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return 0, false
	}
	if err == nil {
		if wait, ok := parseRetryAfter(resp.Header.Get("Retry-After")); ok {
			return wait, true
		}
	}
	// Half the doubled backoff plus a random half, so that clients refused together come back apart.
	d := min(t.backoff<<(attempt-1), maxBackoff)
	if d <= 0 {
		return 0, true
	}
	return d/2 + mathrand.N(d/2+1), true
}

// parseRetryAfter reads Retry-After's two forms: seconds, or an HTTP date.
func parseRetryAfter(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(time.Until(at), 0), true
	}
	return 0, false
}

// sleep waits d unless the request's context ends first, or would end before d is over (then it
// returns false at once: the refusal is answered now instead of after a pointless wait).
func sleep(ctx context.Context, d time.Duration) bool {
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d {
		return false
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// answer is what the generated client gets from the last attempt: the response when it succeeded, an
// *APIError when the API refused it, the connection's error otherwise.
func answer(resp *http.Response, err error, attempts int) (*http.Response, error) {
	if err != nil {
		if attempts > 1 {
			err = fmt.Errorf("%w (after %d attempts)", err, attempts)
		}
		return nil, err
	}
	if resp.StatusCode < http.StatusBadRequest {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, readAPIError(resp)
}
