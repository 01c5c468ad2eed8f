package api

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
)

// TestRouteRefusals: a path no route takes is 404 route_not_found, a routed path with a method it does
// not take is 405 method_not_allowed naming the methods it does take, both in JSON and without a key; an id holding an encoded "/" is one (invalid) id, never a path into another route.
func TestRouteRefusals(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_r", "usd", 100)
	cases := []struct {
		method, path string
		status       int
		code, allow  string
	}{
		{http.MethodGet, "/nowhere", 404, "route_not_found", ""},
		{http.MethodGet, "/v1/nowhere", 404, "route_not_found", ""},
		{http.MethodGet, "/v1/accounts/acct_r/", 404, "route_not_found", ""},
		{http.MethodGet, "/consolex", 404, "route_not_found", ""},
		{http.MethodPost, "/healthz", 405, "method_not_allowed", "GET, HEAD"},
		{http.MethodDelete, "/v1/accounts/acct_r", 405, "method_not_allowed", "PUT, GET, HEAD"},
		{http.MethodGet, "/v1/accounts/acct_r/adjustments", 405, "method_not_allowed", "POST"},
		{http.MethodGet, "/v1/accounts/acct_r%2Fadjustments", 400, "invalid_account_id", ""},
	}
	for _, c := range cases {
		req, err := http.NewRequest(c.method, s.url+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.status == 400 {
			req.Header.Set("Authorization", "Bearer "+testAPIKey)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var got errorBody
		if err := json.Unmarshal(body, &got); err != nil || got.Error.Code != c.code || resp.StatusCode != c.status {
			t.Errorf("%s %s = %d %s, want %d %s", c.method, c.path, resp.StatusCode, body, c.status, c.code)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q", c.method, c.path, ct)
		}
		if allow := resp.Header.Get("Allow"); allow != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, allow, c.allow)
		}
	}
}
