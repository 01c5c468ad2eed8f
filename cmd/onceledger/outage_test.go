package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

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

// poolConnections reads the pool's open connections from /metrics.
func poolConnections(t *testing.T, base string) int {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	total := 0
	for _, m := range poolGauge.FindAllStringSubmatch(string(body), -1) {
		n, _ := strconv.Atoi(m[2])
		total += n
	}
	return total
}

// PostgreSQL unreachable for a while: readiness says so, nothing hangs or leaks, and the server
// recovers on its own when the database returns.
func TestDatabaseOutageAndRecovery(t *testing.T) {
	t.Parallel()
	proxy, url := newFaultProxy(t, dbtest.URL(t))
	base := startServe(t, map[string]string{"DATABASE_URL": url})
	waitStatus(t, base+"/readyz", http.StatusOK, 5*time.Second)

	proxy.Cut()
	for range 20 {
		if got := statusOf(t, base+"/readyz"); got != http.StatusServiceUnavailable {
			t.Fatalf("/readyz during the outage = %d, want 503", got)
		}
	}
	if got := statusOf(t, base+"/healthz"); got != http.StatusOK {
		t.Fatalf("/healthz during the outage = %d, want 200: the process is alive", got)
	}
	if n := poolConnections(t, base); n > 4 {
		t.Fatalf("pool holds %d connections during the outage: failed attempts leak", n)
	}

	proxy.Restore()
	waitStatus(t, base+"/readyz", http.StatusOK, 10*time.Second)
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
