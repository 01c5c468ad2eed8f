package main

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceledger/onceledger/db/dbtest"
)

// 1,000 events delivered by redelivering senders while the server's database connections are
// terminated at random moments: every transaction either committed whole or left nothing, and the
// retries converge to exactly the expected ledger.
func TestDatabaseConnectionsKilledUnderLoad(t *testing.T) {
	t.Parallel()
	url := dbtest.URL(t)
	w := newWorkload(200)
	w.createAccounts(t, url)
	base := startServe(t, map[string]string{"DATABASE_URL": url, "STRIPE_WEBHOOK_SECRET": loadSecret})

	ctx, stopKiller := context.WithCancel(context.Background())
	var (
		killed, inTx int
		stopped      sync.WaitGroup
	)
	var d delivery
	stopped.Go(func() { killed, inTx = killConnections(t, ctx, url, d.delivered.Load) })

	w.deliverAll(t, base, 4, &d)
	stopKiller()
	stopped.Wait()
	t.Logf("%d server connections terminated, %d of them inside a transaction; answers: %v", killed, inTx, d.statuses)
	if inTx == 0 || d.count("503") == 0 {
		t.Fatalf("no delivery died mid-transaction (%d connections terminated, %d inside one, %d answers 503): the test proves little", killed, inTx, d.count("503"))
	}
	if n := d.count("500"); n > 0 {
		t.Errorf("%d deliveries answered 500: a terminated connection must be a 503, which Stripe retries", n)
	}
	w.assertLedger(t, url)

	// Every answered attempt is counted, by outcome and in the latency histogram, and the pool says
	// it served them.
	metrics := scrape(t, base)
	if got := sumSamples(metrics, `onceledger_webhook_deliveries_total\{[^}]*\}`); got != d.answered.Load() {
		t.Errorf("webhook deliveries counted %d, senders got %d answers", got, d.answered.Load())
	}
	if got := sumSamples(metrics, `onceledger_http_request_duration_seconds_count\{method="POST",route="/webhooks/stripe",[^}]*\}`); got != d.answered.Load() {
		t.Errorf("webhook latency observed %d times, senders got %d answers", got, d.answered.Load())
	}
	if got := sumSamples(metrics, `onceledger_webhook_deliveries_total\{outcome="failed",[^}]*\}`); got != int64(d.count("503")) {
		t.Errorf("failed deliveries counted %d, senders got %d answers 503", got, d.count("503"))
	}
	if got := sumSamples(metrics, `onceledger_db_pool_acquires_total`); got < int64(len(w.events)) {
		t.Errorf("pool acquired %d connections for %d events", got, len(w.events))
	}
}

// killConnections terminates other connections to the database at random moments until ctx ends,
// from a connection of its own: every one, or (every other round, on average) only those inside a
// transaction, so that deliveries die mid-transaction too. Each round waits for at least one more
// delivery to have been accepted (delivered counts them), so that on a slow machine the server still
// makes progress between two rounds instead of losing every attempt. It returns how many it
// terminated, and how many of those were inside a transaction.
func killConnections(t *testing.T, ctx context.Context, url string, delivered func() int64) (killed, inTx int) {
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Errorf("killer: %v", err)
		return 0, 0
	}
	defer conn.Close(context.Background())
	var progress int64
	for {
		select {
		case <-ctx.Done():
			return killed, inTx
		case <-time.After(20*time.Millisecond + rand.N(80*time.Millisecond)):
		}
		done := delivered()
		if done == progress {
			continue
		}
		progress = done
		var n, m int
		err := conn.QueryRow(context.Background(), `
			SELECT count(*), count(*) FILTER (WHERE in_tx)
			FROM (
				SELECT xact_start IS NOT NULL AS in_tx, pg_terminate_backend(pid) AS terminated
				FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid()
				  AND (NOT $1 OR xact_start IS NOT NULL)
			) AS k
			WHERE terminated`, rand.N(2) == 0).Scan(&n, &m)
		if err != nil {
			t.Errorf("killer: %v", err)
			return killed, inTx
		}
		killed, inTx = killed+n, inTx+m
	}
}

// scrape returns the server's /metrics text, read with the key startServe gives a server.
func scrape(t *testing.T, base string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+serveTestKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// sumSamples adds up the values of every sample whose name and labels match series.
func sumSamples(metrics, series string) int64 {
	var total int64
	for _, m := range regexp.MustCompile(`(?m)^`+series+` (\S+)$`).FindAllStringSubmatch(metrics, -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		total += int64(v)
	}
	return total
}
