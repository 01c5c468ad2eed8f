package console_test

import (
	"context"
	"math/bits"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onceledger/onceledger/internal/config"
)

// Sessions live in the database: two servers on one database (replicas) share them, from the login
// form's token to the logged-in session; a review names the key that logged in, in the event and in the
// audit trail; after logout a copied cookie is refused by both; a session ends after its idle timeout
// and at its absolute expiry (backdated on the database clock).
func TestConsoleSessionsAcrossReplicas(t *testing.T) {
	t.Parallel()
	a := newConsoleServer(t)
	b := newConsoleServerOn(t, a.pool, config.Config{})
	a.deliver(refundEvent("evt_replica_refund", "re_replica", "pi_replica", 100))

	// The login form of one replica, posted to the other.
	c := newClient(t, a.url, &http.Client{})
	token := c.csrfToken("/console/login")
	c.base = b.url
	wantStatus(t, c.send(http.MethodPost, "/console/login", url.Values{"key": {opsKey}, "csrf_token": {token}}), http.StatusSeeOther, "/console/")
	copied := *c.cookie
	for _, srv := range []string{a.url, b.url} {
		c.base = srv
		wantStatus(t, c.send(http.MethodGet, "/console/", nil), http.StatusOK, "")
	}

	// A review on one replica names the operator's key.
	c.base = a.url
	token = c.csrfToken("/console/events/evt_replica_refund")
	wantStatus(t, c.send(http.MethodPost, "/console/events/evt_replica_refund/review", url.Values{"csrf_token": {token}}),
		http.StatusSeeOther, "/console/events/evt_replica_refund?done=reviewed")
	var reviewedBy string
	if err := a.pool.QueryRow(context.Background(), `SELECT reviewed_by FROM stripe_events WHERE event_id = 'evt_replica_refund'`).Scan(&reviewedBy); err != nil || reviewedBy != "ops" {
		t.Fatalf("reviewed_by %q (%v), want ops", reviewedBy, err)
	}
	var audited int
	if err := a.pool.QueryRow(context.Background(), `SELECT count(*) FROM audit_log
		WHERE key_name = 'ops' AND action = 'console POST /console/events/{id}/review' AND target_id = 'evt_replica_refund' AND outcome = 'ok'`).Scan(&audited); err != nil || audited != 1 {
		t.Fatalf("%d audit records of the review (%v), want 1", audited, err)
	}

	// Logout on the other replica revokes the session everywhere: the copied cookie is refused by both.
	c.base = b.url
	wantStatus(t, c.send(http.MethodPost, "/console/logout", url.Values{"csrf_token": {token}}), http.StatusSeeOther, "/console/login")
	for _, srv := range []string{a.url, b.url} {
		stolen := newClient(t, srv, &http.Client{})
		stolen.cookie = &copied
		wantStatus(t, stolen.send(http.MethodGet, "/console/", nil), http.StatusSeeOther, "/console/login")
		token := stolen.csrfToken("/console/login") // the revoked cookie is an anonymous session now
		wantStatus(t, stolen.send(http.MethodPost, "/console/events/evt_replica_refund/replay", url.Values{"csrf_token": {token}}),
			http.StatusSeeOther, "/console/login")
	}

	// Idle too long, or past its absolute lifetime: the session is over.
	for _, backdate := range []string{
		`UPDATE console_sessions SET last_seen_at = now() - interval '31 minutes' WHERE revoked_at IS NULL`,
		`UPDATE console_sessions SET created_at = now() - interval '9 hours', expires_at = now() - interval '1 hour' WHERE revoked_at IS NULL`,
	} {
		c := newClient(t, a.url, &http.Client{})
		token := c.csrfToken("/console/login")
		wantStatus(t, c.send(http.MethodPost, "/console/login", url.Values{"key": {opsKey}, "csrf_token": {token}}), http.StatusSeeOther, "/console/")
		wantStatus(t, c.send(http.MethodGet, "/console/", nil), http.StatusOK, "")
		if _, err := a.pool.Exec(context.Background(), backdate); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, c.send(http.MethodGet, "/console/", nil), http.StatusSeeOther, "/console/login")
	}
}

// Told the console is served over TLS (CONSOLE_SECURE_COOKIE, or a non-loopback ADDR), the session
// cookie is Secure and every answer carries HSTS, though the TLS ends at a proxy before the server.
func TestConsoleCookieSecureBehindAProxy(t *testing.T) {
	t.Parallel()
	s := newConsoleServer(t)
	secure := newConsoleServerOn(t, s.pool, config.Config{SecureCookies: true})
	c := newClient(t, secure.url, &http.Client{})
	resp := c.send(http.MethodGet, "/console/login", nil)
	if c.cookie == nil || !c.cookie.Secure || resp.Header.Get("Strict-Transport-Security") == "" {
		t.Fatalf("cookie %+v, HSTS %q: want Secure and HSTS", c.cookie, resp.Header.Get("Strict-Transport-Security"))
	}
	plain := newClient(t, s.url, &http.Client{})
	resp = plain.send(http.MethodGet, "/console/login", nil)
	if plain.cookie == nil || plain.cookie.Secure || resp.Header.Get("Strict-Transport-Security") != "" {
		t.Fatalf("cookie %+v, HSTS %q: want neither on a loopback server", plain.cookie, resp.Header.Get("Strict-Transport-Security"))
	}
}

// The audit trail's page is for admin keys: an operator's session is refused it.
func TestConsoleAuditPageIsForAdmins(t *testing.T) {
	t.Parallel()
	s := newConsoleServer(t)
	for key, status := range map[string]int{apiKey: http.StatusOK, opsKey: http.StatusForbidden} {
		c := newClient(t, s.url, &http.Client{})
		token := c.csrfToken("/console/login")
		wantStatus(t, c.send(http.MethodPost, "/console/login", url.Values{"key": {key}, "csrf_token": {token}}), http.StatusSeeOther, "/console/")
		wantStatus(t, c.send(http.MethodGet, "/console/audit", nil), status, "")
	}
	wantStatus(t, newClient(t, s.url, &http.Client{}).send(http.MethodGet, "/console/audit", nil), http.StatusSeeOther, "/console/login")
}

// A thousand wrong console logins from one address: a handful are checked, the rest refused unchecked
// (429 with Retry-After); every failure is logged with the address, and in the audit trail.
func TestConsoleLoginIsThrottled(t *testing.T) {
	t.Parallel()
	s := newConsoleServer(t)
	c := newClient(t, s.url, &http.Client{})
	token := c.csrfToken("/console/login")
	answers, start := map[int]int{}, time.Now()
	for i := range 1000 {
		resp := c.send(http.MethodPost, "/console/login", url.Values{"key": {"guess_" + strconv.Itoa(i) + "_onceledger_0000000000"}, "csrf_token": {token}})
		answers[resp.StatusCode]++
		if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
	}
	// Three free failures, then one more each time the doubling delay has passed: 1 s, 3 s, 7 s, …
	if checked := 3 + 1 + bits.Len(uint(time.Since(start).Seconds())); answers[http.StatusUnauthorized] > checked ||
		answers[http.StatusUnauthorized]+answers[http.StatusTooManyRequests] != 1000 {
		t.Fatalf("answers %v in %s: want at most %d keys checked, the rest refused", answers, time.Since(start), checked)
	}
	logs, err := os.ReadFile(s.logFile)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(logs), "remote=127.0.0.1"); n < 1000 {
		t.Fatalf("%d failures logged with their address, want 1000", n)
	}
	var audited int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM audit_log WHERE action = 'console POST /console/login' AND status IN (401, 429)`).Scan(&audited); err != nil || audited != 1000 {
		t.Fatalf("%d refused logins in the audit trail (%v), want 1000", audited, err)
	}
}

// A console action's record commits with its effect: a replay whose record fails changes nothing and
// leaves no record; one that commits has exactly one, written with it, as the login has.
func TestConsoleReplayRecordCommitsWithIt(t *testing.T) {
	t.Parallel()
	s := newConsoleServer(t)
	ctx := context.Background()
	s.deliver(refundEvent("evt_audit_replay", "re_audit_replay", "pi_audit_replay", 100))
	c := newClient(t, s.url, &http.Client{})
	token := c.csrfToken("/console/login")
	wantStatus(t, c.send(http.MethodPost, "/console/login", url.Values{"key": {opsKey}, "csrf_token": {token}}), http.StatusSeeOther, "/console/")
	records := func(action string) int {
		t.Helper()
		var n int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM audit_log
			WHERE key_name = 'ops' AND action = $1 AND status = 303 AND outcome = 'ok'`, action).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := records("console POST /console/login"); n != 1 {
		t.Fatalf("%d records of the login, want 1", n)
	}

	const replay = "console POST /console/events/{id}/replay"
	if _, err := s.pool.Exec(ctx, `ALTER TABLE audit_log ADD CONSTRAINT audit_log_test_refused CHECK (action <> '`+replay+`')`); err != nil {
		t.Fatal(err)
	}
	before := s.event("evt_audit_replay").OutcomeAt
	token = c.csrfToken("/console/events/evt_audit_replay")
	if resp := c.send(http.MethodPost, "/console/events/evt_audit_replay/replay", url.Values{"csrf_token": {token}}); resp.StatusCode == http.StatusSeeOther {
		t.Fatal("the replay committed, yet its record was refused")
	}
	if after := s.event("evt_audit_replay").OutcomeAt; !after.Equal(before) || records(replay) != 0 {
		t.Fatalf("after a failed record: outcome recorded at %v (was %v), %d records; want neither", after, before, records(replay))
	}

	if _, err := s.pool.Exec(ctx, `ALTER TABLE audit_log DROP CONSTRAINT audit_log_test_refused`); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, c.send(http.MethodPost, "/console/events/evt_audit_replay/replay", url.Values{"csrf_token": {token}}),
		http.StatusSeeOther, "/console/events/evt_audit_replay?done=replayed")
	if after := s.event("evt_audit_replay").OutcomeAt; !after.After(before) || records(replay) != 1 {
		t.Fatalf("after the replay: outcome recorded at %v (was %v), %d records; want a later one, and 1", after, before, records(replay))
	}
}
