package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/config"
)

// pool_* parameters in DATABASE_URL are the pool's, never PostgreSQL's: migrate goes down and up with
// them (database/sql used to send them to the server, which refused the connection), and the server's
// pool is sized by DB_MAX_CONNS, else by pool_max_conns, else by the default.
func TestPoolParametersInDatabaseURLAndDBMaxConns(t *testing.T) {
	t.Parallel()
	url := dbtest.URL(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	withPool := url + sep + "pool_max_conns=3&pool_min_conns=1"
	for _, args := range [][]string{{"migrate", "down", "1"}, {"migrate", "up"}, {"migrate", "version"}} {
		stdout := &output{}
		if err := run(context.Background(), args, getenvFrom(map[string]string{"DATABASE_URL": withPool}), stdout, &output{}); err != nil {
			t.Fatalf("%v with pool parameters in DATABASE_URL: %v", args, err)
		}
		if args[1] == "version" && !strings.Contains(stdout.String(), "dirty=false") {
			t.Fatalf("migrate version printed %q", stdout)
		}
	}

	for _, c := range []struct {
		vars map[string]string
		want int
	}{
		{map[string]string{"DATABASE_URL": url}, config.DefaultDBMaxConns},
		{map[string]string{"DATABASE_URL": withPool}, 3},
		{map[string]string{"DATABASE_URL": withPool, "DB_MAX_CONNS": "5"}, 5},
	} {
		base := startServe(t, c.vars)
		if got := sumSamples(scrape(t, base), `onceledger_db_pool_max_connections`); got != int64(c.want) {
			t.Errorf("DB_MAX_CONNS %q, DATABASE_URL %s: pool of %d, want %d", c.vars["DB_MAX_CONNS"], strconv.Quote(c.vars["DATABASE_URL"][len(url):]), got, c.want)
		}
	}
}

var pprofListening = regexp.MustCompile(`pprof listening on (http://\S+)`)

// PPROF_ADDR serves the profiles on a listener of its own; unset, serve opens none.
func TestPprofListenerIsOptIn(t *testing.T) {
	t.Parallel()
	url := dbtest.URL(t)
	stdout := &output{}
	base := startServeWithOutput(t, map[string]string{"DATABASE_URL": url, "PPROF_ADDR": "127.0.0.1:0"}, stdout)
	// serve announces the profiling listener just after the API's, which startServe waited for.
	var m []string
	for deadline := time.Now().Add(5 * time.Second); m == nil; time.Sleep(10 * time.Millisecond) {
		if m = pprofListening.FindStringSubmatch(stdout.String()); m == nil && time.Now().After(deadline) {
			t.Fatalf("serve with PPROF_ADDR printed no pprof listener:\n%s", stdout)
		}
	}
	resp, err := http.Get(m[1] + "goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile") {
		t.Fatalf("GET goroutine profile = %d:\n%.200s", resp.StatusCode, body)
	}
	// The API's listener serves no profiles.
	if resp, err := http.Get(base + "/debug/pprof/"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /debug/pprof/ on the API = %v, %v; want 404", resp, err)
	} else {
		resp.Body.Close()
	}

	stdout = &output{}
	startServeWithOutput(t, map[string]string{"DATABASE_URL": url}, stdout)
	if pprofListening.MatchString(stdout.String()) {
		t.Fatalf("serve without PPROF_ADDR opened a pprof listener:\n%s", stdout)
	}
}
