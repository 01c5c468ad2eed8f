package api

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/onceledger/onceledger/internal/access"
)

// TestScopesOnRoutes: each route lets through only a key with its scope (or admin). The product's spend
// key authorises, captures and voids holds and posts decisions, and is refused 403 insufficient_scope on
// adjustments and lot voids; finance's read key reads (the metrics too) and is refused every write; a
// refused request changes nothing.
func TestScopesOnRoutes(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_scope", "usd", 1000)
	as := func(key string) []string {
		return []string{"Authorization", "Bearer " + key, "Idempotency-Key", "k-" + key[:5]}
	}

	// The product's key: holds and decisions.
	s.call(http.MethodPost, "/v1/accounts/acct_scope/holds", map[string]any{"id": "job-1", "amount": 40}, as(spendAPIKey)...).want(t, http.StatusCreated, "")
	s.call(http.MethodPost, "/v1/accounts/acct_scope/holds/job-1/capture", map[string]any{"amount": 30}, as(spendAPIKey)...).want(t, http.StatusOK, "")
	s.call(http.MethodPost, "/v1/accounts/acct_scope/holds", map[string]any{"id": "job-2", "amount": 5}, as(spendAPIKey)...).want(t, http.StatusCreated, "")
	s.call(http.MethodPost, "/v1/accounts/acct_scope/holds/job-2/void", nil, as(spendAPIKey)...).want(t, http.StatusOK, "")
	s.call(http.MethodPost, "/v1/decisions", `[{"id":"d1","account_id":"acct_scope","cost":1}]`, as(spendAPIKey)...).want(t, http.StatusOK, "")
	s.wantMoney("acct_scope", 970, 2)

	refused := []struct{ key, method, path, body string }{
		{spendAPIKey, http.MethodPost, "/v1/accounts/acct_scope/adjustments", `{"amount":100}`},
		{spendAPIKey, http.MethodPost, "/v1/lots/1/void", ``},
		{spendAPIKey, http.MethodPut, "/v1/accounts/acct_new", `{"currency":"usd"}`},
		{spendAPIKey, http.MethodGet, "/v1/accounts/acct_scope", ``},
		{readAPIKey, http.MethodPost, "/v1/accounts/acct_scope/holds", `{"id":"job-3","amount":1}`},
		{readAPIKey, http.MethodPost, "/v1/accounts/acct_scope/adjustments", `{"amount":100}`},
		{readAPIKey, http.MethodPost, "/v1/decisions", `[{"id":"d2","account_id":"acct_scope","cost":1}]`},
		{readAPIKey, http.MethodPost, "/v1/lots/1/void", ``},
		{readAPIKey, http.MethodPut, "/v1/accounts/acct_scope/alerts", `{"thresholds":[]}`},
		{creditAPIKey, http.MethodPost, "/v1/lots/1/void", ``},
		{creditAPIKey, http.MethodPost, "/v1/decisions", `[{"id":"d3","account_id":"acct_scope","cost":1}]`},
		{spendAPIKey, http.MethodGet, "/metrics", ``},
	}
	for _, r := range refused {
		s.call(r.method, r.path, r.body, as(r.key)...).want(t, http.StatusForbidden, "insufficient_scope")
	}
	s.wantMoney("acct_scope", 970, 2)
	if n := s.count(`SELECT count(*) FROM decisions`) + s.count(`SELECT count(*) FROM accounts WHERE id = 'acct_new'`); n != 1 {
		t.Fatalf("refused requests wrote rows: %d decisions and new accounts, want the one decision", n)
	}

	// Finance's key reads; support's credits.
	s.call(http.MethodGet, "/v1/accounts/acct_scope", nil, as(readAPIKey)...).want(t, http.StatusOK, "")
	s.call(http.MethodGet, "/v1/accounts/acct_scope/entries", nil, as(readAPIKey)...).want(t, http.StatusOK, "")
	s.call(http.MethodGet, "/v1/accounts/acct_scope/holds/job-1", nil, as(readAPIKey)...).want(t, http.StatusOK, "")
	s.call(http.MethodGet, "/metrics", nil, as(readAPIKey)...).want(t, http.StatusOK, "")
	s.call(http.MethodGet, "/metrics", nil, "Authorization", "").want(t, http.StatusUnauthorized, "missing_api_key")
	s.call(http.MethodPost, "/v1/accounts/acct_scope/adjustments", `{"amount":100}`, as(creditAPIKey)...).want(t, http.StatusCreated, "")
	s.wantMoney("acct_scope", 1070, 3)
}

// The bearer check of a request let through allocates nothing: the hot routes pay a digest and a compare
// of scope bits, even once the throttle remembers failures.
func TestScopeCheckAllocatesNothing(t *testing.T) {
	keys := testKeys(t, "product:spend:"+spendAPIKey)
	throttle := access.NewThrottle()
	throttle.Fail("192.0.2.1", "wrong_key")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r := httptest.NewRequest(http.MethodPost, "/v1/accounts/acct_1/holds", nil)
	r.Header.Set("Authorization", "Bearer "+spendAPIKey)
	allocs := testing.AllocsPerRun(100, func() {
		key, err := authenticate(keys, throttle, log, r)
		if err != nil || !key.Scopes.Allows(access.Spend) {
			t.Fatalf("refused: %v", err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per check, want 0", allocs)
	}
}
