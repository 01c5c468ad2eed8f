package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

func statusOf(t *testing.T, url string) int {
	t.Helper()
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// waitStatus polls url until it answers want, failing after a deadline.
func waitStatus(t *testing.T, url string, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := statusOf(t, url)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s = %d after %s, want %d", url, got, within, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var poolGauge = regexp.MustCompile(`(?m)^onceledger_db_pool_connections\{state="(\w+)"\} (\d+)$`)

// poolConnections reads the pool's connections in state (every state when empty) from /metrics.
func poolConnections(t *testing.T, base, state string) int {
	t.Helper()
	total := 0
	for _, m := range poolGauge.FindAllStringSubmatch(scrape(t, base), -1) {
		if state != "" && m[1] != state {
			continue
		}
		n, _ := strconv.Atoi(m[2])
		total += n
	}
	return total
}

// PostgreSQL unreachable for a while: readiness says so, webhook deliveries answer 503 and write
// nothing, nothing hangs or leaks (goroutines, connections), and the server recovers on its own when
// the database returns, applying the redelivered event once.
func TestDatabaseOutageAndRecovery(t *testing.T) {
	t.Parallel()
	direct := dbtest.URL(t)
	proxy, url := newFaultProxy(t, direct)
	ctx := context.Background()
	pool := openPool(t, direct)
	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_outage", "gbp", 0); err != nil {
		t.Fatal(err)
	}
	base := startServe(t, map[string]string{"DATABASE_URL": url, "STRIPE_WEBHOOK_SECRET": loadSecret})
	waitStatus(t, base+"/readyz", http.StatusOK, 5*time.Second)
	before := settledGoroutines(t)
	if before == 0 {
		t.Fatal("no goroutine carries the server's label: the leak check would see nothing")
	}

	proxy.Cut()
	// /readyz answers from a check at most a second old: once a check has seen the outage, every probe says so.
	waitStatus(t, base+"/readyz", http.StatusServiceUnavailable, 5*time.Second)
	for range 20 {
		if got := statusOf(t, base+"/readyz"); got != http.StatusServiceUnavailable {
			t.Fatalf("/readyz during the outage = %d, want 503", got)
		}
	}
	if got := statusOf(t, base+"/healthz"); got != http.StatusOK {
		t.Fatalf("/healthz during the outage = %d, want 200: the process is alive", got)
	}
	event := stripeEvent("evt_outage", "checkout.session.completed", map[string]any{
		"id": "cs_outage", "object": "checkout.session", "payment_status": "paid", "amount_total": 1200,
		"currency": "gbp", "metadata": map[string]any{"account_id": "acct_outage"}, "payment_intent": "pi_outage",
	})
	client := &http.Client{Timeout: 10 * time.Second}
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			if status, err := deliverOnce(client, base, event); err != nil || status != http.StatusServiceUnavailable {
				t.Errorf("webhook during the outage: %d, %v; want 503 so that Stripe retries", status, err)
			}
		})
	}
	wg.Wait()
	var written int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM stripe_events) + (SELECT count(*) FROM ledger) + (SELECT count(*) FROM topups)`).Scan(&written); err != nil {
		t.Fatal(err)
	}
	if written != 0 {
		t.Fatalf("%d rows written by deliveries answered 503", written)
	}
	if n := poolConnections(t, base, ""); n > 4 {
		t.Fatalf("pool holds %d connections during the outage: failed attempts leak", n)
	}

	proxy.Restore()
	waitStatus(t, base+"/readyz", http.StatusOK, 10*time.Second)
	for range 2 {
		if status, err := deliverOnce(client, base, event); err != nil || status != http.StatusOK {
			t.Fatalf("webhook after recovery: %d, %v; want 200", status, err)
		}
	}
	acct, err := db.GetAccount(ctx, pool, "acct_outage")
	if err != nil {
		t.Fatal(err)
	}
	if acct.Balance != 1200 {
		t.Fatalf("balance %d after the outage and two redeliveries, want 1200", acct.Balance)
	}
	metrics := scrape(t, base)
	if got := sumSamples(metrics, `onceledger_webhook_deliveries_total\{outcome="failed",reason="",type="checkout.session.completed"\}`); got != 10 {
		t.Errorf("failed deliveries counted %d, want the 10 answered 503", got)
	}
	// Idle connections after recovery are the pool's to keep: River's services reconnect together when
	// the database returns, and on a busy machine the pool opens a few at once for them. A connection a
	// failed or recovered path leaked would stay acquired.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		acquired := poolConnections(t, base, "acquired")
		if acquired <= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("pool holds %d connections acquired after recovery, for sequential requests", acquired)
			break
		}
	}
	waitGoroutines(t, before)
}

// serverGoroutines counts the goroutines of the test's in-process server: startServe labels them,
// and the label is inherited by every goroutine they start, so other tests running in parallel in
// this process do not count.
func serverGoroutines(t *testing.T) int {
	t.Helper()
	// Idle keep-alive connections hold a server goroutine each; they are the client's, not a leak.
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	var profile bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&profile, 1); err != nil {
		t.Fatal(err)
	}
	label, _ := json.Marshal(map[string]string{"serve": t.Name()})
	total := 0
	for _, record := range strings.Split(profile.String(), "\n\n") {
		if !strings.Contains(record, "# labels: "+string(label)+"\n") {
			continue
		}
		n, _ := strconv.Atoi(strings.Fields(record)[0])
		total += n
	}
	return total
}

// settledGoroutines is serverGoroutines once the count has held for a second (at most 10 s): the
// server's River client starts its services in the background after serve is ready.
func settledGoroutines(t *testing.T) int {
	t.Helper()
	last, same := serverGoroutines(t), 0
	for deadline := time.Now().Add(10 * time.Second); same < 5 && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		now := serverGoroutines(t)
		if now == last {
			same++
		} else {
			last, same = now, 0
		}
	}
	return last
}

// waitGoroutines waits for the server's goroutines to come back to about what they were; a few
// spare ones (a pool connection being made or closed) are not a leak.
func waitGoroutines(t *testing.T, before int) {
	t.Helper()
	const spare = 3
	var now int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if now = serverGoroutines(t); now <= before+spare {
			return
		}
	}
	t.Errorf("the server runs %d goroutines after recovery, %d before the outage: a leak", now, before)
}

// Headers past the server's limit are refused before any handler runs.
func TestOversizedHeadersAreRefused(t *testing.T) {
	t.Parallel()
	base := startServe(t, map[string]string{"DATABASE_URL": dbtest.URL(t)})
	req, _ := http.NewRequest(http.MethodGet, base+"/healthz", nil)
	req.Header.Set("X-Padding", strings.Repeat("a", 128<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("128 KiB header: status %d, want 431", resp.StatusCode)
	}
}

// A client that trickles its headers is cut off by the server's read-header timeout instead of
// holding a connection forever.
func TestSlowClientIsCutOff(t *testing.T) {
	t.Parallel()
	base := startServe(t, map[string]string{"DATABASE_URL": dbtest.URL(t)})
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = bufio.NewReader(conn).ReadString('\n')
	if err == nil {
		// The server may answer 408 before closing; either way it must not wait for us.
		err = io.EOF
	}
	if waited := time.Since(start); waited > 15*time.Second {
		t.Fatalf("server held a half-sent request for %s (err %v)", waited, err)
	}
}
