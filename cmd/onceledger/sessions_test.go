package main

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/onceledger/onceledger/db/dbtest"
)

// consoleKey is an operator's key of the two servers.
const consoleKey = "ops:operate:console_two_serves_onceledger_000"

// csrfField is the CSRF token of a console page's form.
var csrfField = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

// Two `onceledger serve` processes on one database share console sessions: the login form of one is
// posted to the other, the session works on both, and after logout on one a copy of the cookie is
// refused by both.
func TestTwoServeProcessesShareConsoleSessions(t *testing.T) {
	t.Parallel()
	databaseURL := dbtest.URL(t)
	var replicas [2]string
	for i := range replicas {
		replicas[i] = startServe(t, map[string]string{"DATABASE_URL": databaseURL, "ONCELEDGER_API_KEYS": consoleKey})
	}
	noRedirects := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var cookie *http.Cookie
	send := func(method, base, path string, form url.Values) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(form.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := noRedirects.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, c := range resp.Cookies() {
			if c.Name == "onceledger_console" {
				cookie = c
			}
		}
		return resp, string(body)
	}
	token := func(base, path string) string {
		t.Helper()
		_, page := send(http.MethodGet, base, path, nil)
		m := csrfField.FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no csrf_token on %s%s:\n%s", base, path, page)
		}
		return m[1]
	}

	login := token(replicas[0], "/console/login")
	resp, _ := send(http.MethodPost, replicas[1], "/console/login", url.Values{"key": {consoleKey[len("ops:operate:"):]}, "csrf_token": {login}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/" {
		t.Fatalf("login on the other server: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	copied := *cookie
	for _, base := range replicas {
		if resp, _ := send(http.MethodGet, base, "/console/", nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: the session answered %d", base, resp.StatusCode)
		}
	}
	logout := token(replicas[0], "/console/")
	if resp, _ := send(http.MethodPost, replicas[0], "/console/logout", url.Values{"csrf_token": {logout}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	for _, base := range replicas {
		cookie = &copied
		if resp, _ := send(http.MethodGet, base, "/console/", nil); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/login" {
			t.Fatalf("%s: the copied cookie after logout answered %d to %q, want the login page", base, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
}
