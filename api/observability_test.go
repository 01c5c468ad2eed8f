package api_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/onceledger/onceledger/api"
	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/config"
	"github.com/onceledger/onceledger/internal/metrics"
)

// Every way a delivery is refused before it is applied is counted as rejected, with its reason.
func TestWebhookMetricsCountEveryRejection(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	body := topupEvent("evt_topup", "cs_1", "pi_1", "acct_1", 1000)
	huge := append(bytes.Repeat([]byte(" "), 2<<20), body...)
	notJSON, notEvent := []byte(`{"id":`), []byte(`{"hello":"world"}`)
	deliveries := []struct {
		body      []byte
		signature string
		status    int
	}{
		{body, "", 400},
		{body, "", 400},
		{body, sign(body, testSecret, time.Now().Add(-time.Hour)), 400},
		{body, sign(body, "whsec_wrong", time.Now()), 400},
		{notJSON, sign(notJSON, testSecret, time.Now()), 400},
		{notEvent, sign(notEvent, testSecret, time.Now()), 400},
		{huge, sign(huge, testSecret, time.Now()), 413},
	}
	for _, d := range deliveries {
		if r := s.post(d.body, d.signature); r.status != d.status {
			t.Fatalf("answered %d %s, want %d", r.status, r.raw, d.status)
		}
	}
	for _, w := range []struct {
		labels []string
		n      float64
	}{
		{[]string{"unverified", "rejected", "missing_signature"}, 2},
		{[]string{"unverified", "rejected", "stale_signature"}, 1},
		{[]string{"unverified", "rejected", "invalid_signature"}, 1},
		{[]string{"unverified", "rejected", "invalid_json"}, 1},
		{[]string{"unknown", "rejected", "invalid_event"}, 1},
		{[]string{"unverified", "rejected", "body_too_large"}, 1},
	} {
		if got := testutil.ToFloat64(s.metrics.WebhookDeliveries.WithLabelValues(w.labels...)); got != w.n {
			t.Errorf("webhook deliveries %v = %v, want %v", w.labels, got, w.n)
		}
	}
	if got := testutil.CollectAndCount(s.metrics.WebhookDeliveries); got != 6 {
		t.Errorf("%d delivery series, want the 6 above", got)
	}
	if n := s.rowsWritten(); n != 0 {
		t.Errorf("%d rows written by rejected deliveries", n)
	}
}

// logBuffer collects JSON log records, safe for the server's goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// record returns the first record with this message and event id.
func (l *logBuffer) record(t *testing.T, msg, eventID string) map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := bufio.NewScanner(bytes.NewReader(l.buf.Bytes()))
	for lines.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(lines.Bytes(), &rec); err != nil {
			t.Fatalf("log line is not JSON: %s", lines.Bytes())
		}
		if rec["msg"] == msg && rec["event"] == eventID {
			return rec
		}
	}
	t.Fatalf("no %q record for %s in the log:\n%s", msg, eventID, l.buf.String())
	return nil
}

// stringList reads a JSON list of strings from a decoded log record.
func stringList(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, s := range list {
		out = append(out, s.(string))
	}
	return out
}

// The log of a delivery names its event and the dedupe key of every entry it posted, including those
// of the events it un-parked, so any entry can be traced to the delivery that made it.
func TestWebhookLogsEventAndDedupeKeys(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	var logs logBuffer
	m := metrics.New()
	deps := api.WiredDeps(pool, config.Config{WebhookSecrets: []string{testSecret}},
		slog.New(slog.NewJSONHandler(&logs, nil)), db.LedgerConfig{Observe: m.ObservePosting})
	deps.Metrics = m
	srv := httptest.NewServer(api.NewHandler(deps))
	t.Cleanup(srv.Close)
	s := &webhookServer{t: t, pool: pool, url: srv.URL, metrics: m}
	s.createAccount("acct_1", "gbp")

	if r := s.deliver(refundEvent("refund.created", "evt_refund", "re_1", "pi_1", 300, "succeeded")); r.Parked != "unknown_payment" {
		t.Fatalf("refund before its payment answered %+v, want parked", r)
	}
	if r := s.deliver(topupEvent("evt_topup", "cs_1", "pi_1", "acct_1", 1000)); !r.Credited || r.Reversed != 1 {
		t.Fatalf("top-up answered %+v, want credited and the refund un-parked", r)
	}

	parked := logs.record(t, "stripe event", "evt_refund")
	if parked["outcome"] != "parked" || parked["parked"] != "unknown_payment" || parked["payment_intent"] != "pi_1" {
		t.Errorf("parked delivery logged %v", parked)
	}
	applied := logs.record(t, "stripe event", "evt_topup")
	if keys := stringList(applied["posted"]); !slices.Equal(keys, []string{"stripe:evt_topup", "stripe:refund:re_1"}) {
		t.Errorf("top-up logged posted keys %q, want its own and the un-parked refund's", keys)
	}
	if unparked := stringList(applied["unparked"]); !slices.Equal(unparked, []string{"evt_refund"}) {
		t.Errorf("top-up logged un-parked events %q", unparked)
	}

	s.deliver(topupEvent("evt_topup", "cs_1", "pi_1", "acct_1", 1000))
	if dup := logs.record(t, "stripe event duplicate", "evt_topup"); dup["type"] != "checkout.session.completed" {
		t.Errorf("duplicate logged %v", dup)
	}
}
