package metrics_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/onceledger/onceledger/api"
	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/access"
	"github.com/onceledger/onceledger/internal/config"
	"github.com/onceledger/onceledger/internal/metrics"
)

// A known sequence of postings shows up, counted by kind and result.
func TestPostingsAreCountedByKindAndResult(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	m := metrics.New()
	ledger := dbtest.Ledger(t, pool, db.LedgerConfig{Observe: m.ObservePosting})
	if _, err := ledger.CreateAccount(ctx, "acct_m", "usd", 100); err != nil {
		t.Fatal(err)
	}
	post := func(p db.Posting) error {
		return db.InTx(ctx, pool, func(tx pgx.Tx) error { _, err := ledger.Post(ctx, tx, p); return err })
	}
	topup := db.Posting{AccountID: "acct_m", Kind: db.KindTopup, Amount: 500, DedupeKey: "stripe:evt_m"}
	for range 3 {
		if err := post(topup); err != nil {
			t.Fatal(err)
		}
	}
	topup.Amount = 600
	if err := post(topup); !errors.Is(err, db.ErrDedupeConflict) {
		t.Fatalf("err = %v, want ErrDedupeConflict", err)
	}

	want := map[[2]string]float64{
		{"grant", "posted"}: 1, {"topup", "posted"}: 1, {"topup", "replay"}: 2, {"topup", "conflict"}: 1,
	}
	for labels, n := range want {
		if got := testutil.ToFloat64(m.Postings.WithLabelValues(labels[0], labels[1])); got != n {
			t.Errorf("postings{kind=%s,result=%s} = %v, want %v", labels[0], labels[1], got, n)
		}
	}
}

// /metrics exports request latency by route template, and the pool's statistics, to a read key.
func TestMetricsEndpointExportsLatencyAndPool(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	m := metrics.New()
	m.WatchPool(pool)
	// Prometheus scrapes with a read key.
	const scrapeKey = "prometheus_onceledger_metrics_test_0000"
	keys, err := access.Parse([]string{"prometheus:read:" + scrapeKey})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.NewHandler(api.Deps{Pool: pool, Metrics: m, Config: config.Config{APIKeys: keys}}))
	defer srv.Close()

	for range 2 {
		resp, err := http.Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+scrapeKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`onceledger_http_request_duration_seconds_count{method="GET",route="/healthz",status="200"} 2`,
		`onceledger_db_pool_max_connections`,
		`onceledger_db_pool_connections{state="idle"}`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// The group-commit Poster counts exactly as Post does: replays and conflicts settled inside a group
// too.
func TestPosterPostingsAreCounted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	m := metrics.New()
	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_p", "usd", 0); err != nil {
		t.Fatal(err)
	}
	poster := dbtest.Ledger(t, pool, db.LedgerConfig{Observe: m.ObservePosting})
	credit := db.Posting{AccountID: "acct_p", Kind: db.KindAdjustment, Amount: 50, DedupeKey: "api:acct_p:k1", NoOverdraw: true}
	for range 3 {
		if _, err := poster.PostGrouped(ctx, credit); err != nil {
			t.Fatal(err)
		}
	}
	credit.Amount = 60
	if _, err := poster.PostGrouped(ctx, credit); !errors.Is(err, db.ErrDedupeConflict) {
		t.Fatalf("err = %v, want ErrDedupeConflict", err)
	}
	for result, n := range map[string]float64{"posted": 1, "replay": 2, "conflict": 1} {
		if got := testutil.ToFloat64(m.Postings.WithLabelValues("adjustment", result)); got != n {
			t.Errorf("adjustment %s = %v, want %v", result, got, n)
		}
	}
}

// A method nobody defined, on a route that takes any, is labelled OTHER: clients cannot grow /metrics.
func TestTimedLabelsUnknownMethodsAsOther(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	h := m.Timed("/console", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, method := range []string{"GET", "BREW", "PROPFIND"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(method, "/console", nil))
	}
	if n := testutil.CollectAndCount(m.HTTPDuration); n != 2 {
		t.Fatalf("%d label sets after GET, BREW and PROPFIND, want 2 (GET and OTHER)", n)
	}
}
