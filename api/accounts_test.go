package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/onceledger/onceledger/internal/config"
)

func TestPutAccountCreatesOnceAndGrantsOnce(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) { c.SignupGrant = 500 })

	got := s.call(http.MethodPut, "/v1/accounts/acct_1", map[string]string{"currency": "usd"}).want(t, http.StatusCreated, "")
	if got.JSON["created"] != true || got.JSON["granted"] != true {
		t.Fatalf("first PUT: %s", got.Body)
	}
	if b := got.JSON["account"].(map[string]any)["balance"]; b != float64(500) {
		t.Fatalf("balance in reply %v, want 500", b)
	}
	again := s.call(http.MethodPut, "/v1/accounts/acct_1", map[string]string{"currency": "usd"}).want(t, http.StatusOK, "")
	if again.JSON["created"] != false || again.JSON["granted"] != false {
		t.Fatalf("second PUT: %s", again.Body)
	}
	s.call(http.MethodPut, "/v1/accounts/acct_1", map[string]string{"currency": "eur"}).want(t, http.StatusConflict, "currency_mismatch")

	s.wantMoney("acct_1", 500, 1) // one grant
}

func TestGetAccount(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct:get.1", "eur", 250)

	got := s.call(http.MethodGet, "/v1/accounts/acct:get.1", nil).want(t, http.StatusOK, "")
	acct := got.JSON["account"].(map[string]any)
	if acct["id"] != "acct:get.1" || acct["currency"] != "eur" || acct["balance"] != float64(250) {
		t.Fatalf("account %s", got.Body)
	}
	s.call(http.MethodGet, "/v1/accounts/nobody", nil).want(t, http.StatusNotFound, "account_not_found")
	s.call(http.MethodGet, "/v1/accounts/"+strings.Repeat("a", 65), nil).want(t, http.StatusBadRequest, "invalid_account_id")
	s.call(http.MethodGet, "/v1/accounts/a%20b", nil).want(t, http.StatusBadRequest, "invalid_account_id")
}

func TestPutAccountRefusesBadInput(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) { c.SignupGrant = 100 })
	cases := []struct {
		name, path string
		body       any
		status     int
		code       string
	}{
		{"missing currency", "/v1/accounts/a1", `{}`, 400, "invalid_currency"},
		{"upper-case currency", "/v1/accounts/a1", `{"currency":"USD"}`, 400, "invalid_currency"},
		{"short currency", "/v1/accounts/a1", `{"currency":"us"}`, 400, "invalid_currency"},
		{"currency of the wrong type", "/v1/accounts/a1", `{"currency":840}`, 400, "invalid_currency"},
		{"null currency", "/v1/accounts/a1", `{"currency":null}`, 400, "invalid_currency"},
		{"unknown field", "/v1/accounts/a1", `{"currency":"usd","balance":1000000}`, 400, "unknown_field"},
		{"empty body", "/v1/accounts/a1", ``, 400, "empty_body"},
		{"not JSON", "/v1/accounts/a1", `currency=usd`, 400, "invalid_json"},
		{"truncated JSON", "/v1/accounts/a1", `{"currency":"usd"`, 400, "invalid_json"},
		{"two values", "/v1/accounts/a1", `{"currency":"usd"}{}`, 400, "invalid_json"},
		{"array body", "/v1/accounts/a1", `["usd"]`, 400, "invalid_body"},
		{"oversized body", "/v1/accounts/a1", `{"currency":"usd","x":"` + strings.Repeat("x", 20<<10) + `"}`, 413, "body_too_large"},
		{"id too long", "/v1/accounts/" + strings.Repeat("a", 65), `{"currency":"usd"}`, 400, "invalid_account_id"},
		{"id with a slash-free bad character", "/v1/accounts/a!b", `{"currency":"usd"}`, 400, "invalid_account_id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s.in(t).call(http.MethodPut, c.path, c.body).want(t, c.status, c.code)
		})
	}
	if n := s.count(`SELECT count(*) FROM accounts`) + s.count(`SELECT count(*) FROM ledger`); n != 0 {
		t.Fatalf("bad input wrote %d rows", n)
	}
}

// TestAuthOnEveryV1Route: no route under /v1 answers without a configured key, in constant time.
func TestAuthOnEveryV1Route(t *testing.T) {
	t.Parallel()
	withKeys := newPatientServer(t)
	withoutKeys := newServer(t, func(c *config.Config) { c.APIKeys = nil })
	withKeys.createAccount("acct_auth", "usd", 0)

	v1 := []struct{ method, path, body string }{
		{http.MethodPut, "/v1/accounts/acct_auth", `{"currency":"usd"}`},
		{http.MethodGet, "/v1/accounts/acct_auth", ``},
		{http.MethodGet, "/v1/accounts/acct_auth/entries", ``},
		{http.MethodPost, "/v1/accounts/acct_auth/adjustments", `{"amount":100}`},
		{http.MethodPost, "/v1/accounts/acct_auth/topups", `{"amount":100,"success_url":"https://example.com/ok"}`},
		{http.MethodGet, "/v1/topups/top_1", ``},
		{http.MethodPost, "/v1/decisions", `[{"id":"d1","account_id":"acct_auth","cost":1}]`},
		{http.MethodGet, "/v1/stripe/events", ``},
	}
	for _, r := range v1 {
		t.Run(r.method+" "+r.path, func(t *testing.T) {
			withKeys, withoutKeys := withKeys.in(t), withoutKeys.in(t)
			withKeys.call(r.method, r.path, r.body, "Authorization", "", "Idempotency-Key", "k").want(t, 401, "missing_api_key")
			withKeys.call(r.method, r.path, r.body, "Authorization", "Basic "+testAPIKey, "Idempotency-Key", "k").want(t, 401, "missing_api_key")
			withKeys.call(r.method, r.path, r.body, "Authorization", "Bearer wrong", "Idempotency-Key", "k").want(t, 401, "invalid_api_key")
			withKeys.call(r.method, r.path, r.body, "Authorization", "Bearer "+testAPIKey+"x", "Idempotency-Key", "k").want(t, 401, "invalid_api_key")
			got := withoutKeys.call(r.method, r.path, r.body, "Idempotency-Key", "k").want(t, 401, "api_keys_not_configured")
			if !strings.Contains(string(got.Body), "ONCELEDGER_API_KEYS") {
				t.Fatalf("401 without keys does not say how to set them: %s", got.Body)
			}
		})
	}
	// Nothing an unauthenticated request asked for happened.
	if n := withKeys.count(`SELECT count(*) FROM ledger`) + withKeys.count(`SELECT count(*) FROM decisions`) +
		withKeys.count(`SELECT count(*) FROM topups`); n != 0 {
		t.Fatalf("unauthenticated requests wrote %d rows", n)
	}
	// Either configured key works.
	withKeys.call(http.MethodGet, "/v1/accounts/acct_auth", nil, "Authorization", "Bearer "+otherAPIKey).want(t, 200, "")
	withKeys.call(http.MethodGet, "/v1/accounts/acct_auth", nil, "Authorization", "bearer "+testAPIKey).want(t, 200, "")
}
