package console_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/onceledger/onceledger/api"
	"github.com/onceledger/onceledger/internal/config"
)

// client talks to the console without following redirects, carrying its one cookie by hand.
type client struct {
	t      *testing.T
	base   string
	http   *http.Client
	cookie *http.Cookie
}

func newClient(t *testing.T, base string, hc *http.Client) *client {
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &client{t: t, base: base, http: hc}
}

func (c *client) send(method, path string, form url.Values) *http.Response {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if c.cookie != nil {
		req.AddCookie(c.cookie)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	for _, ck := range resp.Cookies() {
		if ck.Name == "onceledger_console" {
			c.cookie = ck
		}
	}
	return resp
}

// csrfToken reads the token of the form on the page at path (the login form, or any page of a
// logged-in session): its session's token.
func (c *client) csrfToken(path string) string {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.cookie != nil {
		req.AddCookie(c.cookie)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	for _, ck := range resp.Cookies() {
		if ck.Name == "onceledger_console" {
			c.cookie = ck
		}
	}
	page, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	const marker = `name="csrf_token" value="`
	i := bytes.Index(page, []byte(marker))
	if i < 0 {
		c.t.Fatalf("no csrf_token on %s (%d):\n%s", path, resp.StatusCode, page)
	}
	rest := page[i+len(marker):]
	return string(rest[:bytes.IndexByte(rest, '"')])
}

func wantStatus(t *testing.T, resp *http.Response, status int, location string) {
	t.Helper()
	if resp.StatusCode != status || resp.Header.Get("Location") != location {
		t.Fatalf("%s %s: %d to %q, want %d to %q", resp.Request.Method, resp.Request.URL.Path,
			resp.StatusCode, resp.Header.Get("Location"), status, location)
	}
}

// The session and CSRF rules, request by request: every page is behind a login; the session cookie
// is HttpOnly, SameSite=Strict, scoped to /console and a random token (a changed byte is no session); it
// never holds the key; a POST without the session's token is a 403 that changes nothing, the login's
// included; every answer carries the Content-Security-Policy.
func TestConsoleSessionsAndCSRF(t *testing.T) {
	t.Parallel()
	s := newConsoleServer(t)
	s.deliver(refundEvent("evt_session_refund", "re_session", "pi_session", 100))
	c := newClient(t, s.url, &http.Client{})

	resp := c.send(http.MethodGet, "/console/", nil)
	wantStatus(t, resp, http.StatusSeeOther, "/console/login")
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") ||
		!strings.Contains(csp, "style-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Fatalf("Content-Security-Policy %q", csp)
	}

	// A login POST needs the login form's session and token.
	wantStatus(t, c.send(http.MethodPost, "/console/login", url.Values{"key": {apiKey}}), http.StatusForbidden, "")
	token := c.csrfToken("/console/login")
	anonymous := c.cookie
	if !anonymous.HttpOnly || anonymous.SameSite != http.SameSiteStrictMode || anonymous.Path != "/console" || anonymous.Secure {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/console, not Secure over plain HTTP", anonymous)
	}
	wantStatus(t, c.send(http.MethodPost, "/console/login", url.Values{"key": {apiKey}}), http.StatusForbidden, "")
	wantStatus(t, c.send(http.MethodPost, "/console/login", url.Values{"key": {apiKey}, "csrf_token": {token + "x"}}), http.StatusForbidden, "")
	wantStatus(t, c.send(http.MethodPost, "/console/login", url.Values{"key": {"wrong"}, "csrf_token": {token}}), http.StatusUnauthorized, "")
	// The product's and finance's keys are API keys, but not an operator's.
	wantStatus(t, c.send(http.MethodPost, "/console/login", url.Values{"key": {spendKey}, "csrf_token": {token}}), http.StatusForbidden, "")
	wantStatus(t, c.send(http.MethodPost, "/console/login", url.Values{"key": {readKey}, "csrf_token": {token}}), http.StatusForbidden, "")
	wantStatus(t, c.send(http.MethodGet, "/console/", nil), http.StatusSeeOther, "/console/login")

	wantStatus(t, c.send(http.MethodPost, "/console/login", url.Values{"key": {apiKey}, "csrf_token": {token}}), http.StatusSeeOther, "/console/")
	if c.cookie.Value == anonymous.Value || strings.Contains(c.cookie.Value, apiKey) {
		t.Fatal("logging in kept the anonymous session, or put the key in the cookie")
	}
	wantStatus(t, c.send(http.MethodGet, "/console/", nil), http.StatusOK, "")

	// The logged-in session has its own token: the anonymous one no longer works.
	review := "/console/events/evt_session_refund/review"
	wantStatus(t, c.send(http.MethodPost, review, url.Values{}), http.StatusForbidden, "")
	wantStatus(t, c.send(http.MethodPost, review, url.Values{"csrf_token": {token}}), http.StatusForbidden, "")
	if ev := s.event("evt_session_refund"); ev.ReviewedAt != nil {
		t.Fatal("a refused review marked the event reviewed")
	}
	token = c.csrfToken("/console/events/evt_session_refund")
	wantStatus(t, c.send(http.MethodPost, review, url.Values{"csrf_token": {token}}), http.StatusSeeOther,
		"/console/events/evt_session_refund?done=reviewed")
	if ev := s.event("evt_session_refund"); ev.ReviewedAt == nil {
		t.Fatal("the review with its token did not mark the event reviewed")
	}

	// Logging out clears the cookie.
	wantStatus(t, c.send(http.MethodPost, "/console/logout", url.Values{"csrf_token": {token}}), http.StatusSeeOther, "/console/login")
	if c.cookie.MaxAge >= 0 {
		t.Fatalf("logout left the cookie %+v", c.cookie)
	}
	c.cookie = nil
	wantStatus(t, c.send(http.MethodGet, "/console/", nil), http.StatusSeeOther, "/console/login")

	// An unknown event is a 404 page; a bad filter a 400.
	token = c.csrfToken("/console/login")
	c.send(http.MethodPost, "/console/login", url.Values{"key": {apiKey}, "csrf_token": {token}})
	wantStatus(t, c.send(http.MethodGet, "/console/events/evt_never_received", nil), http.StatusNotFound, "")
	wantStatus(t, c.send(http.MethodGet, "/console/events?outcome=bogus", nil), http.StatusBadRequest, "")

	// A cookie with one byte changed is no session.
	forged := *c.cookie
	forged.Value = flipFirstChar(forged.Value)
	c.cookie = &forged
	wantStatus(t, c.send(http.MethodGet, "/console/", nil), http.StatusSeeOther, "/console/login")
}

// flipFirstChar changes a cookie's first character, every bit of which is the token's: the last one of
// an unpadded base64 token of 32 bytes carries two bits the decoder ignores, so changing it may leave
// the token as it was.
func flipFirstChar(s string) string {
	if s[0] == 'A' {
		return "B" + s[1:]
	}
	return "A" + s[1:]
}

// Under TLS the session cookie is Secure.
func TestConsoleCookieIsSecureUnderTLS(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(api.NewHandler(api.Deps{Config: config.Config{APIKeys: testKeys(t)}}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, srv.Client())
	c.csrfToken("/console/login")
	if c.cookie == nil || !c.cookie.Secure {
		t.Fatalf("session cookie over TLS: %+v, want Secure", c.cookie)
	}
}
