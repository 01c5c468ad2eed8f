package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestAuditTrail: every mutation and every refusal is in GET /v1/audit with the key's name, the route,
// the ids and the outcome; reads are not; only an admin key lists it; the trail cannot be rewritten.
func TestAuditTrail(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_audit", "usd", 1000)
	as := func(key string) []string { return []string{"Authorization", "Bearer " + key, "Idempotency-Key", "k1"} }

	s.call(http.MethodPost, "/v1/accounts/acct_audit/holds", map[string]any{"id": "job-1", "amount": 40}, as(spendAPIKey)...).want(t, http.StatusCreated, "")
	s.call(http.MethodPost, "/v1/accounts/acct_audit/holds/job-1/capture", map[string]any{"amount": 50}, as(spendAPIKey)...).want(t, http.StatusBadRequest, "amount_exceeds_hold")
	s.call(http.MethodPost, "/v1/accounts/acct_audit/adjustments", `{"amount":100}`, as(spendAPIKey)...).want(t, http.StatusForbidden, "insufficient_scope")
	s.call(http.MethodPost, "/v1/lots/7/void", nil, as(readAPIKey)...).want(t, http.StatusForbidden, "insufficient_scope")
	s.call(http.MethodGet, "/v1/accounts/acct_audit", nil, as(readAPIKey)...).want(t, http.StatusOK, "")
	s.call(http.MethodGet, "/v1/accounts/acct_audit", nil, "Authorization", "Bearer wrong").want(t, http.StatusUnauthorized, "invalid_api_key")
	s.call(http.MethodGet, "/v1/audit", nil, as(readAPIKey)...).want(t, http.StatusForbidden, "insufficient_scope")

	var got []string
	next := ""
	for {
		page := s.call(http.MethodGet, "/v1/audit?limit=2"+next, nil).want(t, http.StatusOK, "")
		for _, rec := range page.JSON["records"].([]any) {
			r := rec.(map[string]any)
			if r["remote_addr"] != "127.0.0.1" {
				t.Errorf("record %v: remote_addr, want 127.0.0.1", r)
			}
			got = append(got, fmt.Sprintf("%s|%s|%v|%v|%.0f|%s", r["key_name"], r["action"], r["account_id"], r["target_id"], r["status"], r["outcome"]))
		}
		cursor, ok := page.JSON["next"].(string)
		if !ok {
			break
		}
		next = "&before=" + cursor
	}
	want := []string{
		"finance|GET /v1/audit|<nil>|<nil>|403|insufficient_scope",
		"|GET /v1/accounts/{id}|acct_audit|<nil>|401|invalid_api_key",
		"finance|POST /v1/lots/{id}/void|<nil>|7|403|insufficient_scope",
		"product|POST /v1/accounts/{id}/adjustments|acct_audit|<nil>|403|insufficient_scope",
		"product|POST /v1/accounts/{id}/holds/{hold_id}/capture|acct_audit|job-1|400|amount_exceeds_hold",
		"product|POST /v1/accounts/{id}/holds|acct_audit|<nil>|201|ok",
		// createAccount's, with the bare admin key named after its first characters.
		"test_k|POST /v1/accounts/{id}/adjustments|acct_audit|<nil>|201|ok",
		"test_k|PUT /v1/accounts/{id}|acct_audit|<nil>|201|ok",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("audit trail, newest first:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	for _, stmt := range []string{`UPDATE audit_log SET key_name = 'someone'`, `DELETE FROM audit_log`, `TRUNCATE audit_log`} {
		_, err := s.pool.Exec(context.Background(), stmt)
		if err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v, want refused as append-only", stmt, err)
		}
	}
	if n := s.count(`SELECT count(*) FROM audit_log WHERE key_name = 'someone'`); n != 0 {
		t.Fatalf("%d records rewritten", n)
	}
}
