package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"regexp"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

// output collects what a command prints, safe to read while it runs.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// openPool opens the database for the test's own reads and writes, closed when the test ends.
func openPool(t *testing.T, databaseURL string) *pgxpool.Pool {
	t.Helper()
	pool, err := db.Open(context.Background(), databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// ledger posts with no side effects.
var ledger db.Ledger

func getenvFrom(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

var listening = regexp.MustCompile(`listening on (http://\S+)`)

// startServe runs the real `onceledger serve` on a free port and returns its base URL; the server is
// stopped, and must have shut down cleanly, when the test ends. Every goroutine the server starts
// carries the profiler label serve=<test name> (see serverGoroutines).
// serveTestKey is the API key of a served test that names none.
const serveTestKey = "serve_test_key_onceledger_0000000000"

func startServe(t *testing.T, vars map[string]string) string {
	t.Helper()
	return startServeWithOutput(t, vars, &output{})
}

// startServeWithOutput is startServe, with what serve prints collected in stdout.
func startServeWithOutput(t *testing.T, vars map[string]string, stdout *output) string {
	t.Helper()
	return startServeWithErrors(t, vars, stdout, &output{})
}

// startServeWithErrors is startServe, with what serve prints collected in stdout and its log in stderr.
func startServeWithErrors(t *testing.T, vars map[string]string, stdout, stderr *output) string {
	t.Helper()
	vars["ADDR"] = "127.0.0.1:0"
	if vars["ONCELEDGER_API_KEYS"] == "" {
		vars["ONCELEDGER_API_KEYS"] = serveTestKey // serve refuses to start without a key
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go pprof.Do(ctx, pprof.Labels("serve", t.Name()), func(ctx context.Context) {
		done <- run(ctx, []string{"serve"}, getenvFrom(vars), stdout, stderr)
	})
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve returned %v; logs:\n%s", err, stderr)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := listening.FindStringSubmatch(stdout.String()); m != nil {
			return m[1]
		}
		select {
		case err := <-done:
			done <- err // for the cleanup, which would otherwise wait for it forever
			t.Fatalf("serve exited early: %v; logs:\n%s", err, stderr)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("serve did not start; logs:\n%s", stderr)
	return ""
}

func TestServeAnswersHealthAndReadiness(t *testing.T) {
	t.Parallel()
	base := startServe(t, map[string]string{"DATABASE_URL": dbtest.URL(t)})
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s = %d, want 200", path, resp.StatusCode)
		}
	}
}

func TestReadyzRefusesAnOutdatedSchema(t *testing.T) {
	t.Parallel()
	url := dbtest.URL(t)
	if err := run(context.Background(), []string{"migrate", "down", "1"}, getenvFrom(map[string]string{"DATABASE_URL": url}), &output{}, &output{}); err != nil {
		t.Fatalf("migrate down: %v", err)
	}
	base := startServe(t, map[string]string{"DATABASE_URL": url})
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("GET /readyz with schema one behind = %d, want 503", resp.StatusCode)
	}
}

func TestVerifyExitCodeFollowsTheLedger(t *testing.T) {
	t.Parallel()
	url := dbtest.URL(t)
	ctx := context.Background()
	pool := openPool(t, url)
	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_verify", "usd", 300); err != nil {
		t.Fatal(err)
	}
	vars := getenvFrom(map[string]string{"DATABASE_URL": url})

	stdout := &output{}
	if err := run(ctx, []string{"verify"}, vars, stdout, &output{}); err != nil {
		t.Fatalf("verify on a clean ledger: %v\n%s", err, stdout)
	}

	if _, err := pool.Exec(ctx, `UPDATE accounts SET balance = 0 WHERE id = 'acct_verify'`); err != nil {
		t.Fatal(err)
	}
	stdout = &output{}
	err := run(ctx, []string{"verify"}, vars, stdout, &output{})
	if !errors.Is(err, errViolations) || exitCode(err) == 0 {
		t.Fatalf("verify after tampering: err = %v, want a violation", err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "acct_verify") {
		t.Fatalf("verify printed %q, want one line naming acct_verify", stdout)
	}
}

func TestUnknownCommandIsAUsageError(t *testing.T) {
	t.Parallel()
	err := run(context.Background(), []string{"frobnicate"}, getenvFrom(nil), &output{}, &output{})
	if exitCode(err) != 2 {
		t.Fatalf("exit code = %d (%v), want 2", exitCode(err), err)
	}
}
