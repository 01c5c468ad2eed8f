package api

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/config"
)

// refusedConnection returns a pool whose every connection the server refuses with a FATAL of its
// own SQLSTATE: a database that does not exist (3D000), a role that does not exist (28000).
func refusedConnection(t *testing.T, change func(u *url.URL)) *pgxpool.Pool {
	t.Helper()
	u, err := url.Parse(dbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	change(u)
	pool, err := pgxpool.New(context.Background(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestConnectionRefusedIsUnavailable: a FATAL while connecting, whatever its SQLSTATE, is 503
// unavailable (try again), never 500; and /readyz says so without naming the user, database or
// address.
func TestConnectionRefusedIsUnavailable(t *testing.T) {
	t.Parallel()
	for name, change := range map[string]func(u *url.URL){
		"no such database": func(u *url.URL) { u.Path = "/onceledger_no_such_database" },
		"no such role":     func(u *url.URL) { u.User = url.User("onceledger_no_such_role") },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool := refusedConnection(t, change)
			_, err := db.GetAccount(context.Background(), pool, "acct")
			if !db.IsTransient(err) {
				t.Fatalf("db.IsTransient(%v) = false", err)
			}
			s := newServerOn(t, pool)
			s.call(http.MethodGet, "/v1/accounts/acct_x", nil).want(t, http.StatusServiceUnavailable, "unavailable")
			s.call(http.MethodPost, "/v1/accounts/acct_x/adjustments", map[string]any{"amount": 5}, "Idempotency-Key", "k").
				want(t, http.StatusServiceUnavailable, "unavailable")
			ready := s.call(http.MethodGet, "/readyz", nil).want(t, http.StatusServiceUnavailable, "not_ready")
			for _, secret := range []string{"onceledger_no_such", "127.0.0.1", "5432", "postgres"} {
				if strings.Contains(string(ready.Body), secret) {
					t.Fatalf("/readyz reveals %q: %s", secret, ready.Body)
				}
			}
		})
	}
}

// TestSlowBodyAnswerRevealsNoAddress: a body that stops arriving before the server's read deadline is
// 400 invalid_json with a fixed message; the connection's addresses stay in the log.
func TestSlowBodyAnswerRevealsNoAddress(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ts := httptest.NewUnstartedServer(NewHandler(Deps{Pool: pool, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Config: config.Config{APIKeys: testKeys(t, testAPIKey)}}))
	ts.Config.ReadTimeout = 300 * time.Millisecond
	ts.Start()
	t.Cleanup(ts.Close)

	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/decisions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n[{\"id\"", testAPIKey)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body.String(), `"invalid_json"`) {
		t.Fatalf("slow body = %d %s, want 400 invalid_json", resp.StatusCode, body.String())
	}
	if strings.Contains(body.String(), "127.0.0.1") || strings.Contains(body.String(), "tcp") {
		t.Fatalf("the answer reveals the connection: %s", body.String())
	}
}

// TestV1BodiesRefuseLooseKeys: a key twice in one object (the last would win) or a key matching a
// field only when case is ignored is 400 invalid_json on every /v1 body, and writes nothing.
func TestV1BodiesRefuseLooseKeys(t *testing.T) {
	t.Parallel()
	s := newServer(t, withStripe("http://127.0.0.1:9")) // never reached: the body is refused first
	s.createAccount("acct_k", "usd", 100)
	cases := []struct {
		name, method, path, body string
	}{
		{"adjustment, amount twice", http.MethodPost, "/v1/accounts/acct_k/adjustments", `{"amount":5,"amount":-5}`},
		{"adjustment, Amount", http.MethodPost, "/v1/accounts/acct_k/adjustments", `{"Amount":5}`},
		{"adjustment, AMOUNT", http.MethodPost, "/v1/accounts/acct_k/adjustments", `{"AMOUNT":5}`},
		{"adjustment, amount and Amount", http.MethodPost, "/v1/accounts/acct_k/adjustments", `{"amount":5,"Amount":-5}`},
		{"account, Currency", http.MethodPut, "/v1/accounts/acct_new", `{"Currency":"usd"}`},
		{"account, currency twice", http.MethodPut, "/v1/accounts/acct_new", `{"currency":"usd","currency":"eur"}`},
		{"decision, cost twice", http.MethodPost, "/v1/decisions", `[{"id":"d1","account_id":"acct_k","cost":1,"cost":-1}]`},
		{"decision, Cost", http.MethodPost, "/v1/decisions", `[{"id":"d1","account_id":"acct_k","Cost":1}]`},
		{"topup, Amount", http.MethodPost, "/v1/accounts/acct_k/topups", `{"Amount":500,"success_url":"https://x/s","cancel_url":"https://x/c"}`},
	}
	for _, c := range cases {
		s.in(t).call(c.method, c.path, c.body, "Idempotency-Key", "loose").want(t, http.StatusBadRequest, "invalid_json")
	}
	s.wantMoney("acct_k", 100, 1)
	if n := s.count(`SELECT count(*) FROM accounts`) + s.count(`SELECT count(*) FROM decisions`) + s.count(`SELECT count(*) FROM topups`); n != 1 {
		t.Fatalf("loose keys wrote %d rows, want only the one account", n)
	}
}
