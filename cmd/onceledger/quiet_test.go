package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/stripefake"
)

// quietFor is how long serve runs with every background pass due every second or two.
const quietFor = time.Minute

// A minute of serve with every background pass running often (billing, hold and lot expiry, recovery,
// the recharge and alert sweeper, notifications, the Stripe drift pass), each with work to do: decisions
// to bill, a hold and a lot past their time, an account below its recharge threshold and its alert.
// Nothing is logged at WARN or above. Under make test-citus this is the quiet minute on the cluster,
// where a pass that cannot be planned there logs an error every time it runs.
func TestServeQuietMinuteWithEveryPassRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.URL(t)
	pool := openPool(t, url)
	stripeAPI := stripefake.New()
	t.Cleanup(stripeAPI.Close)
	var notified atomic.Int64
	receiver := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { notified.Add(1) }))
	t.Cleanup(receiver.Close)
	stdout, stderr := &output{}, &output{}
	base := startServeWithErrors(t, map[string]string{
		"DATABASE_URL": url, "ONCELEDGER_API_KEYS": "quiet_key_onceledger_000000000000", "NOTIFY_URL": receiver.URL, "NOTIFY_SECRET": "s",
		"STRIPE_SECRET_KEY": stripefake.SecretKey, "STRIPE_API_BASE": stripeAPI.URL,
		"RECONCILE_INTERVAL": "1s", "STRIPE_RECONCILE_INTERVAL": "2s", "SIGNUP_GRANT": "1000", "GRANT_TTL": "1h",
	}, stdout, stderr)
	calls := 0
	call := func(method, path, body string, want int) {
		t.Helper()
		calls++
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer quiet_key_onceledger_000000000000")
		req.Header.Set("Idempotency-Key", fmt.Sprintf("quiet-%d", calls))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s %s answered %d, want %d", method, path, resp.StatusCode, want)
		}
	}

	for _, acct := range []string{"acct_q1", "acct_q2", "acct_q3"} {
		call(http.MethodPut, "/v1/accounts/"+acct, `{"currency":"usd"}`, http.StatusCreated)
	}
	// acct_q1 recharges below 900 and alerts below 800, with a card saved (as a top-up saving it would).
	if _, err := pool.Exec(ctx, `UPDATE accounts SET stripe_customer = 'cus_q1', payment_method = 'pm_q1' WHERE id = 'acct_q1'`); err != nil {
		t.Fatal(err)
	}
	call(http.MethodPut, "/v1/accounts/acct_q1/recharge", `{"enabled":true,"threshold":900,"amount":500}`, http.StatusOK)
	call(http.MethodPut, "/v1/accounts/acct_q1/alerts", `{"low_balance":800}`, http.StatusOK)
	call(http.MethodPost, "/v1/accounts/acct_q1/adjustments", `{"amount":-250}`, http.StatusCreated)
	// A hold of acct_q2 and the grant lot of acct_q3, both past their time.
	call(http.MethodPost, "/v1/accounts/acct_q2/holds", `{"id":"h_quiet","amount":100,"expires_in":"1m"}`, http.StatusCreated)
	if _, err := pool.Exec(ctx, `UPDATE holds SET created_at = now() - interval '2 minutes', expires_at = now() - interval '1 minute' WHERE account_id = 'acct_q2'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE credit_lots SET created_at = now() - interval '2 minutes', expires_at = now() - interval '1 minute' WHERE account_id = 'acct_q3'`); err != nil {
		t.Fatal(err)
	}
	// Decisions of every account, to bill.
	call(http.MethodPost, "/v1/decisions", `[{"id":"d_q1","account_id":"acct_q1","cost":5},`+
		`{"id":"d_q2","account_id":"acct_q2","cost":5},{"id":"d_q3","account_id":"acct_q3","cost":5}]`, http.StatusOK)

	time.Sleep(quietFor)

	var warnings []string
	lines := bufio.NewScanner(strings.NewReader(stderr.String()))
	for lines.Scan() {
		var line struct{ Level string }
		if json.Unmarshal(lines.Bytes(), &line) == nil && (line.Level == "WARN" || line.Level == "ERROR") {
			warnings = append(warnings, lines.Text())
		}
	}
	if len(warnings) > 0 {
		t.Fatalf("%d lines at WARN or above in a quiet minute, the first:\n%s", len(warnings), strings.Join(warnings[:min(5, len(warnings))], "\n"))
	}
	// Every pass had its work done: the rows the debit's trigger wrote at commit (the recharge attempt,
	// the alert) were taken up by the sweeper and the notifier, and the drift pass recorded a window.
	var billed, holdsExpired, lotsExpired, recharged, alerted, driftWindows int
	err := pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM ledger WHERE kind = 'usage' AND account_id IN ('acct_q1', 'acct_q2', 'acct_q3')),
		       (SELECT count(*) FROM holds WHERE account_id = 'acct_q2' AND status = 'expired'),
		       (SELECT count(*) FROM ledger WHERE account_id = 'acct_q3' AND kind = 'expiry'),
		       (SELECT count(*) FROM recharge_attempts WHERE account_id = 'acct_q1' AND payment_intent IS NOT NULL),
		       (SELECT count(*) FROM balance_alerts WHERE account_id = 'acct_q1'),
		       (SELECT count(*) FROM stripe_drift_checkpoints)`).Scan(&billed, &holdsExpired, &lotsExpired, &recharged, &alerted, &driftWindows)
	if err != nil {
		t.Fatal(err)
	}
	if billed != 3 || holdsExpired != 1 || lotsExpired != 1 || recharged == 0 || alerted == 0 || driftWindows == 0 || notified.Load() == 0 {
		t.Fatalf("billed %d, holds expired %d, lots expired %d, recharge attempts with their PaymentIntent %d, alerts %d, drift windows %d, notifications %d; "+
			"want 3, 1, 1 and some of each", billed, holdsExpired, lotsExpired, recharged, alerted, driftWindows, notified.Load())
	}
}
