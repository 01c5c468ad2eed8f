package api

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
)

func putLimit(s *server, account, limit string, body any) reply {
	s.t.Helper()
	return s.call(http.MethodPut, "/v1/accounts/"+account+"/limits/"+limit, body)
}

// limitWindow returns the limit as GET …/limits shows it.
func limitWindow(s *server, account, limit string) map[string]any {
	s.t.Helper()
	got := s.call(http.MethodGet, "/v1/accounts/"+account+"/limits", nil).want(s.t, http.StatusOK, "")
	for _, l := range got.JSON["limits"].([]any) {
		if l := l.(map[string]any); l["id"] == limit {
			return l
		}
	}
	s.t.Fatalf("no limit %s in %s", limit, got.Body)
	return nil
}

// 1,000 concurrent authorisations of 7 through the API (the group-committing authoriser) under a hard
// cap of 1,000 a day: exactly 142 granted, every other one 409 limit_exceeded naming the limit, its
// window and what it has left; nothing kept for a refusal.
func TestLimitsAPI1000ConcurrentAuthorisations(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_l", "usd", 1_000_000)
	putLimit(s, "acct_l", "daily", map[string]any{"scope": "account", "period": "day", "amount": 1000, "mode": "hard"}).want(t, http.StatusOK, "")

	replies := make([]reply, 1000)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range replies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			replies[i] = authorise(s, "acct_l", map[string]any{"id": fmt.Sprintf("h%d", i), "amount": 7, "subject": "agent-1"})
		}()
	}
	close(start)
	wg.Wait()
	var created int64
	for _, r := range replies {
		if r.Status == http.StatusCreated {
			created++
			continue
		}
		r.want(t, http.StatusConflict, "limit_exceeded")
		e := r.JSON["error"].(map[string]any)
		if e["limit_id"] != "daily" || e["period"] != "day" || e["remaining"] != float64(6) || e["window_start"] == nil {
			t.Fatalf("refusal: %s", r.Body)
		}
	}
	if created != 142 {
		t.Fatalf("%d authorisations granted, want 142", created)
	}
	w := limitWindow(s, "acct_l", "daily")
	if w["held"] != float64(994) || w["spent"] != float64(0) || w["remaining"] != float64(6) || w["over"] != float64(0) {
		t.Fatalf("window: %v", w)
	}
	if n := s.count(`SELECT count(*) FROM holds WHERE account_id = 'acct_l'`); n != 142 {
		t.Fatalf("%d holds kept, want 142", n)
	}
	s.wantHeld("acct_l", 1_000_000, 994)
	s.wantClean()
}

// Bad input is a 400 naming the field, and writes nothing; PUT replaces, keeping the window's counts;
// DELETE removes, and a second DELETE is 404.
func TestLimitsAPIValidationAndLifecycle(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_v", "usd", 1000)
	valid := map[string]any{"scope": "subject", "scope_value": "alice@example.com", "period": "week", "amount": 100, "mode": "hard"}
	with := func(field string, value any) map[string]any {
		out := map[string]any{}
		for k, v := range valid {
			out[k] = v
		}
		if value == nil {
			delete(out, field)
		} else {
			out[field] = value
		}
		return out
	}
	for _, tc := range []struct {
		limit string
		body  any
		code  string
	}{
		{"bad id!", valid, "invalid_limit_id"},
		{"l", with("scope", "team"), "invalid_scope"},
		{"l", with("scope", nil), "invalid_scope"},
		{"l", with("scope_value", nil), "invalid_scope_value"},
		{"l", with("scope_value", "not a subject"), "invalid_scope_value"},
		{"l", map[string]any{"scope": "account", "scope_value": "x", "period": "day", "amount": 1, "mode": "soft"}, "invalid_scope_value"},
		{"l", map[string]any{"scope": "feature", "scope_value": "a@b", "period": "day", "amount": 1, "mode": "soft"}, "invalid_scope_value"},
		{"l", with("period", "year"), "invalid_period"},
		{"l", with("amount", 0), "invalid_amount"},
		{"l", with("amount", -5), "invalid_amount"},
		{"l", with("amount", 1e19), "invalid_amount"}, // beyond a bigint
		{"l", with("mode", "strict"), "invalid_mode"},
	} {
		putLimit(s, "acct_v", tc.limit, tc.body).want(t, http.StatusBadRequest, tc.code)
	}
	authorise(s, "acct_v", map[string]any{"id": "h", "amount": 1, "subject": "not a subject"}).want(t, http.StatusBadRequest, "invalid_subject")
	authorise(s, "acct_v", map[string]any{"id": "h", "amount": 1, "feature": "a@b"}).want(t, http.StatusBadRequest, "invalid_feature")
	if n := s.count(`SELECT count(*) FROM spend_limits`) + s.count(`SELECT count(*) FROM holds`); n != 0 {
		t.Fatalf("bad input wrote %d rows", n)
	}
	putLimit(s, "acct_none", "l", valid).want(t, http.StatusNotFound, "account_not_found")

	putLimit(s, "acct_v", "alice", valid).want(t, http.StatusOK, "")
	authorise(s, "acct_v", map[string]any{"id": "h1", "amount": 60, "subject": "alice@example.com"}).want(t, http.StatusCreated, "")
	authorise(s, "acct_v", map[string]any{"id": "h2", "amount": 60, "subject": "alice@example.com"}).want(t, http.StatusConflict, "limit_exceeded")
	authorise(s, "acct_v", map[string]any{"id": "h3", "amount": 60, "subject": "bob"}).want(t, http.StatusCreated, "")
	// Replaced with a higher cap: the window keeps its 60 held, and has room for the second.
	putLimit(s, "acct_v", "alice", with("amount", 150)).want(t, http.StatusOK, "")
	if w := limitWindow(s, "acct_v", "alice"); w["held"] != float64(60) || w["remaining"] != float64(90) || w["scope_value"] != "alice@example.com" {
		t.Fatalf("replaced limit: %v", w)
	}
	authorise(s, "acct_v", map[string]any{"id": "h2", "amount": 60, "subject": "alice@example.com"}).want(t, http.StatusCreated, "")
	s.call(http.MethodDelete, "/v1/accounts/acct_v/limits/alice", nil).want(t, http.StatusNoContent, "")
	s.call(http.MethodDelete, "/v1/accounts/acct_v/limits/alice", nil).want(t, http.StatusNotFound, "limit_not_found")
	// The holds it counted are resolved as usual, and a limit created again under its id never counted
	// them: their release leaves its window alone.
	putLimit(s, "acct_v", "alice", valid).want(t, http.StatusOK, "")
	authorise(s, "acct_v", map[string]any{"id": "h4", "amount": 30, "subject": "alice@example.com"}).want(t, http.StatusCreated, "")
	void(s, "acct_v", "h1").want(t, http.StatusOK, "")
	capture(s, "acct_v", "h2", nil).want(t, http.StatusOK, "")
	if w := limitWindow(s, "acct_v", "alice"); w["held"] != float64(30) || w["spent"] != float64(0) {
		t.Fatalf("the limit created again: %v, want only h4's 30 held", w)
	}
	s.wantClean()
}
