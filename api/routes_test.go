package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/gorilla/mux"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/config"
)

// TestRouteRefusals: a path no route takes is 404 route_not_found, a routed path with a method it does
// not take is 405 method_not_allowed naming the methods it does take, both in JSON and without a key;
// under /console both are pages, with the console's headers. An id holding an encoded "/" is one
// (invalid) id, never a path into another route; any other escaped character reaches the handler
// unescaped.
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
		{http.MethodGet, "/v1/accounts/acct_r/holds/h_r/capture", 405, "method_not_allowed", "POST"},
		{http.MethodPut, "/webhooks/stripe", 405, "method_not_allowed", "POST"},
		{http.MethodGet, "/v1/accounts/acct_r%2Fadjustments", 400, "invalid_account_id", ""},
		{http.MethodGet, "/v1/accounts/acct%5Fr", 200, "", ""},
	}
	for _, c := range cases {
		req, err := http.NewRequest(c.method, s.url+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.status < 404 {
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

	pages := []struct {
		method, path string
		status       int
		allow        string
	}{
		{http.MethodGet, "/console/nowhere", 404, ""},
		{http.MethodPut, "/console/", 405, "GET, HEAD"},
		{http.MethodGet, "/console/events/evt_r/replay", 405, "POST"},
	}
	for _, c := range pages {
		req, err := http.NewRequest(c.method, s.url+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status || resp.Header.Get("Allow") != c.allow ||
			!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || resp.Header.Get("Content-Security-Policy") == "" {
			t.Errorf("%s %s = %d, Allow %q, Content-Type %q, CSP %q; want a %d page, Allow %q",
				c.method, c.path, resp.StatusCode, resp.Header.Get("Allow"), resp.Header.Get("Content-Type"),
				resp.Header.Get("Content-Security-Policy"), c.status, c.allow)
		}
	}
}

// TestGetRoutesTakeHead: a GET route answers HEAD as it answers GET, without a body.
func TestGetRoutesTakeHead(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	for _, path := range []string{"/healthz", "/openapi.yaml", "/console/login"} {
		resp, err := http.Head(s.url + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(body) != 0 {
			t.Errorf("HEAD %s = %d with %d bytes, want 200 without a body", path, resp.StatusCode, len(body))
		}
	}
}

// TestRequestsAreTimedByPattern: a routed request is timed under its route's pattern, never its path
// (whose ids would grow the label set without bound); a refused one is not timed.
func TestRequestsAreTimedByPattern(t *testing.T) {
	t.Parallel()
	h := NewHandler(Deps{Config: config.Config{APIKeys: testKeys(t, testAPIKey)}})
	serve := func(method, path string) string {
		w := httptest.NewRecorder()
		req := httptest.NewRequest(method, path, nil)
		if path == "/metrics" {
			req.Header.Set("Authorization", "Bearer "+testAPIKey)
		}
		h.ServeHTTP(w, req)
		return w.Body.String()
	}
	serve(http.MethodPost, "/v1/accounts/acct_timed/holds/hold_timed/capture") // 401: no key
	serve(http.MethodGet, "/console/events/evt_timed")                         // 303: not logged in
	serve(http.MethodGet, "/nowhere_timed")
	serve(http.MethodDelete, "/v1/accounts/acct_timed")
	exported := serve(http.MethodGet, "/metrics")
	for _, want := range []string{
		`route="/v1/accounts/{id}/holds/{hold_id}/capture",status="401"`,
		`route="/console/events/{id}",status="303"`,
	} {
		if !strings.Contains(exported, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(exported, "_timed") {
		t.Errorf("/metrics holds a path of a request, not only patterns:\n%s", exported)
	}
}

// TestEveryRouteIsBehindItsAuth walks the router, so that a route registered without its guard fails
// here, whoever adds it: every /v1 route answers 401 to a request without a key or with a wrong one,
// and writes nothing; every console route but the login's sends a visitor who has not logged in to
// the login page, whether without a session or with the login form's anonymous one (whose CSRF token
// takes a POST past the CSRF check, to the login check).
func TestEveryRouteIsBehindItsAuth(t *testing.T) {
	t.Parallel()
	s := newPatientServer(t)
	noRedirects := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(method, path string, header http.Header, form url.Values) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, s.url+path, strings.NewReader(form.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = header.Clone()
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		resp, err := noRedirects.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	anonymous, csrfToken := anonymousConsoleSession(t, s.url)

	// Open by design: the login form and its stylesheet, and /console, which only redirects to
	// /console/ (checked as a page).
	openConsole := map[string]bool{"/console/login": false, "/console/static/": false, "/console": false}
	var checked int
	for _, route := range walkRoutes(t) {
		path := routeVar.ReplaceAllString(route.path, "auth_probe")
		method := route.methods[0]
		switch {
		case strings.HasPrefix(route.path, "/v1/"):
			for _, key := range []string{"", "Bearer wrong_key"} {
				resp := send(method, path, http.Header{"Authorization": {key}}, nil)
				if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
					t.Errorf("%s %s with Authorization %q = %d, want 401 with WWW-Authenticate", method, route.path, key, resp.StatusCode)
				}
			}
			checked++
		case route.path == "/console" || strings.HasPrefix(route.path, "/console/"):
			if _, open := openConsole[route.path]; open {
				openConsole[route.path] = true
				continue
			}
			var form url.Values
			if method == http.MethodPost {
				form = url.Values{"csrf_token": {csrfToken}}
			}
			for name, header := range map[string]http.Header{"no session": {}, "anonymous session": anonymous} {
				resp := send(method, path, header, form)
				if name == "no session" && method == http.MethodPost {
					// Refused by the CSRF check before the login check: no form is taken without a session.
					if resp.StatusCode != http.StatusForbidden {
						t.Errorf("%s %s without a session = %d, want 403", method, route.path, resp.StatusCode)
					}
					continue
				}
				if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/login" {
					t.Errorf("%s %s with %s = %d to %q, want 303 to /console/login", method, route.path, name, resp.StatusCode, resp.Header.Get("Location"))
				}
			}
			checked++
		}
	}
	for path, seen := range openConsole {
		if !seen {
			t.Errorf("%s is listed as open but not routed", path)
		}
	}
	if checked == 0 {
		t.Fatal("no guarded route found")
	}
	if _, err := db.GetAccount(context.Background(), s.pool, "auth_probe"); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("a refused request wrote: account auth_probe %v", err)
	}
}

// routeVar is a {variable} of a route's path template.
var routeVar = regexp.MustCompile(`\{[^}]+\}`)

// anonymousConsoleSession opens the console's login form and returns the cookie of its anonymous
// session and that session's CSRF token.
func anonymousConsoleSession(t *testing.T, base string) (http.Header, string) {
	t.Helper()
	resp, err := http.Get(base + "/console/login")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	token := regexp.MustCompile(`name="csrf_token" value="([^"]+)"`).FindSubmatch(page)
	cookies := resp.Cookies()
	if token == nil || len(cookies) != 1 {
		t.Fatalf("login form: %d cookies, token %q", len(cookies), token)
	}
	return http.Header{"Cookie": {cookies[0].String()}}, string(token[1])
}

// walkedRoute is one route of the router, as gorilla's Walk finds it.
type walkedRoute struct {
	path    string
	methods []string
}

// walkRoutes walks the whole router, the console's routes included, and returns every route that
// takes requests (not the prefixes that only lead to subrouters).
func walkRoutes(t *testing.T) []walkedRoute {
	t.Helper()
	var routes []walkedRoute
	err := NewHandler(Deps{}).(*mux.Router).Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		if route.GetHandler() == nil {
			return nil // a prefix: its routes are walked next
		}
		path, err := route.GetPathTemplate()
		if err != nil {
			return err
		}
		methods, err := route.GetMethods()
		if err != nil {
			return fmt.Errorf("%s takes any method: %w", path, err)
		}
		routes = append(routes, walkedRoute{path, methods})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) == 0 {
		t.Fatal("Walk found no route")
	}
	return routes
}

// BenchmarkHotRoutes: a request of each hot route through the whole handler to its first refusal (no
// API key; no signature), which touches no database, so that what routing costs per request is most
// of what is measured.
func BenchmarkHotRoutes(b *testing.B) {
	h := NewHandler(Deps{Config: config.Config{APIKeys: testKeys(b, testAPIKey), WebhookSecrets: []string{"whsec_bench"}}})
	for name, path := range map[string]string{
		"adjustment": "/v1/accounts/acct_bench/adjustments",
		"hold":       "/v1/accounts/acct_bench/holds",
		"capture":    "/v1/accounts/acct_bench/holds/hold_bench/capture",
		"webhook":    "/webhooks/stripe",
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, nil))
				if w.Code != http.StatusUnauthorized && w.Code != http.StatusBadRequest {
					b.Fatalf("POST %s = %d %s", path, w.Code, w.Body)
				}
			}
		})
	}
}
