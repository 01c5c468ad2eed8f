package api

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// vanishingClient is a client that goes away as its answer starts: the request's context is cancelled
// at the answer's first byte, and the answer is lost.
type vanishingClient struct {
	header http.Header
	cancel context.CancelFunc
	status int
}

func (c *vanishingClient) Header() http.Header { return c.header }

func (c *vanishingClient) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
	c.cancel()
}

func (c *vanishingClient) Write(b []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	return len(b), nil
}

// sendAndVanish sends a request with the test API key to the handler in-process, from a client that
// goes away as the answer starts, and returns the status the handler answered with.
func (s *server) sendAndVanish(method, path, body string, headers ...string) int {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, method, path, bytes.NewReader([]byte(body)))
	req.Header.Set("Authorization", "Bearer "+testAPIKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	c := &vanishingClient{header: http.Header{}, cancel: cancel}
	s.handler.ServeHTTP(c, req)
	return c.status
}

// The record of a committed effect commits with it: a client that goes away as its answer starts
// (the request's context cancelled right after the commit) loses the answer, not the record, on
// every mutating route.
func TestAuditRecordOutlivesAVanishedClient(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_gone", "usd", 1000)
	for _, hold := range []string{"h-capture", "h-void"} {
		s.call(http.MethodPost, "/v1/accounts/acct_gone/holds", map[string]any{"id": hold, "amount": 10}).want(t, http.StatusCreated, "")
	}
	putLimit(s, "acct_gone", "weekly", map[string]any{"scope": "account", "period": "week", "amount": 1000, "mode": "hard"}).want(t, http.StatusOK, "")
	lot := s.count(`SELECT min(id) FROM credit_lots WHERE account_id = 'acct_gone'`)

	routes := []struct {
		method, path, pattern, body string
		status                      int
		effect                      string // counts the effect: 1 once committed
	}{
		{http.MethodPut, "/v1/accounts/acct_new", "/v1/accounts/{id}", `{"currency":"usd"}`, http.StatusCreated,
			`SELECT count(*) FROM accounts WHERE id = 'acct_new'`},
		{http.MethodPost, "/v1/accounts/acct_gone/adjustments", "/v1/accounts/{id}/adjustments", `{"amount":5}`, http.StatusCreated,
			`SELECT count(*) FROM ledger WHERE account_id = 'acct_gone' AND amount = 5`},
		{http.MethodPost, "/v1/accounts/acct_gone/holds", "/v1/accounts/{id}/holds", `{"id":"h-new","amount":5}`, http.StatusCreated,
			`SELECT count(*) FROM holds WHERE id = 'h-new'`},
		{http.MethodPost, "/v1/accounts/acct_gone/holds/h-capture/capture", "/v1/accounts/{id}/holds/{hold_id}/capture", "", http.StatusOK,
			`SELECT count(*) FROM holds WHERE id = 'h-capture' AND status = 'captured'`},
		{http.MethodPost, "/v1/accounts/acct_gone/holds/h-void/void", "/v1/accounts/{id}/holds/{hold_id}/void", "", http.StatusOK,
			`SELECT count(*) FROM holds WHERE id = 'h-void' AND status = 'voided'`},
		{http.MethodPost, "/v1/decisions", "/v1/decisions", `[{"id":"dec_gone","account_id":"acct_gone","cost":3}]`, http.StatusOK,
			`SELECT count(*) FROM decisions WHERE id = 'dec_gone'`},
		{http.MethodPost, fmt.Sprintf("/v1/lots/%d/void", lot), "/v1/lots/{id}/void", "", http.StatusOK,
			fmt.Sprintf(`SELECT count(*) FROM credit_lots WHERE id = %d AND closed_at IS NOT NULL`, lot)},
		{http.MethodPut, "/v1/accounts/acct_gone/limits/daily", "/v1/accounts/{id}/limits/{limit_id}",
			`{"scope":"account","period":"day","amount":500,"mode":"soft"}`, http.StatusOK,
			`SELECT count(*) FROM spend_limits WHERE id = 'daily'`},
		{http.MethodDelete, "/v1/accounts/acct_gone/limits/weekly", "/v1/accounts/{id}/limits/{limit_id}", "", http.StatusNoContent,
			`SELECT 1 - count(*) FROM spend_limits WHERE id = 'weekly'`},
		{http.MethodPut, "/v1/accounts/acct_gone/recharge", "/v1/accounts/{id}/recharge", `{"threshold":100,"amount":500,"enabled":false}`, http.StatusOK,
			`SELECT count(*) FROM accounts WHERE id = 'acct_gone' AND recharge_threshold = 100`},
		{http.MethodPut, "/v1/accounts/acct_gone/alerts", "/v1/accounts/{id}/alerts", `{"low_balance":50}`, http.StatusOK,
			`SELECT count(*) FROM accounts WHERE id = 'acct_gone' AND low_balance_alert = 50`},
	}
	for _, r := range routes {
		action := r.method + " " + r.pattern
		records := func() int64 {
			return s.count(`SELECT count(*) FROM audit_log WHERE key_name = 'test_k' AND action = $1 AND status = $2 AND outcome = 'ok'`,
				action, r.status)
		}
		before := records()
		if got := s.sendAndVanish(r.method, r.path, r.body, "Idempotency-Key", "gone"); got != r.status {
			t.Fatalf("%s answered %d, want %d", action, got, r.status)
		}
		if n := s.count(r.effect); n != 1 {
			t.Fatalf("%s: effect counted %d, want 1", action, n)
		}
		if n := records() - before; n != 1 {
			t.Errorf("%s committed, its client went away: %d records of it, want 1", action, n)
		}
	}
}

// A replay is recorded once, by the guard, as a replay; a refusal once, with its code.
func TestAuditRecordsAReplayOnce(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_twice", "usd", 0)
	for _, want := range []int{http.StatusCreated, http.StatusOK} {
		s.call(http.MethodPost, "/v1/accounts/acct_twice/adjustments", `{"amount":5}`, "Idempotency-Key", "twice").want(t, want, "")
	}
	s.call(http.MethodPost, "/v1/accounts/acct_twice/adjustments", `{"amount":6}`, "Idempotency-Key", "twice").want(t, http.StatusConflict, "idempotency_conflict")
	var got []string
	rows, err := s.pool.Query(context.Background(), `SELECT status, outcome FROM audit_log
		WHERE account_id = 'acct_twice' AND action = 'POST /v1/accounts/{id}/adjustments' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var status int
		var outcome string
		if err := rows.Scan(&status, &outcome); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d %s", status, outcome))
	}
	if want := fmt.Sprint([]string{"201 ok", "200 replay", "409 idempotency_conflict"}); fmt.Sprint(got) != want {
		t.Fatalf("records %v, want %s", got, want)
	}
}
