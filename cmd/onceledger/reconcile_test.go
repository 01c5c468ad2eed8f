package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/stripeevents"
	"github.com/onceledger/onceledger/internal/stripefake"
)

// databaseWithAccount returns a fresh database holding one account, and a pool for the test's own
// reads and writes beside the command under test.
func databaseWithAccount(t *testing.T, accountID string) (string, *pgxpool.Pool) {
	t.Helper()
	url := dbtest.URL(t)
	pool := openPool(t, url)
	if _, err := dbtest.Ledger(t, pool).CreateAccount(context.Background(), accountID, "usd", 0); err != nil {
		t.Fatal(err)
	}
	return url, pool
}

func TestReconcileOnceBillsAndReports(t *testing.T) {
	t.Parallel()
	url, pool := databaseWithAccount(t, "acct_cli")
	ctx := context.Background()
	storeDecisions(t, pool, db.Decision{ID: "dec_a", AccountID: "acct_cli", Cost: 2},
		db.Decision{ID: "dec_b", AccountID: "acct_cli", Cost: 3}, db.Decision{ID: "dec_c", AccountID: "acct_nobody", Cost: 4})
	vars := getenvFrom(map[string]string{"DATABASE_URL": url})

	stdout := &output{}
	if err := run(ctx, []string{"reconcile", "--once", "--progress-every", "1"}, vars, stdout, &output{}); err != nil {
		t.Fatalf("reconcile --once: %v\n%s", err, stdout)
	}
	for _, want := range []string{"billed 2 decisions (-5 minor units)", "read 3", "… read 3 decisions",
		"waiting: 1 decisions", "acct_nobody", "not checked (STRIPE_SECRET_KEY not set)"} {
		if !strings.Contains(stdout.String(), want) {
			t.Fatalf("reconcile --once printed:\n%s\nwant %q in it", stdout, want)
		}
	}
	acct, err := db.GetAccount(ctx, pool, "acct_cli")
	if err != nil || acct.Balance != -5 {
		t.Fatalf("acct_cli after reconcile: %+v %v; want balance -5", acct, err)
	}

	stdout = &output{}
	if err := run(ctx, []string{"reconcile", "--once"}, vars, stdout, &output{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "billed 0 decisions") {
		t.Fatalf("second reconcile --once printed:\n%s\nwant nothing billed", stdout)
	}
}

// serve bills in the background every RECONCILE_INTERVAL, and /metrics shows what it billed, what
// waits for an account, and when billing last caught up.
func TestServeBillsDecisionsInTheBackground(t *testing.T) {
	t.Parallel()
	url, pool := databaseWithAccount(t, "acct_bg")
	ctx := context.Background()
	base := startServe(t, map[string]string{"DATABASE_URL": url, "RECONCILE_INTERVAL": "50ms"})
	storeDecisions(t, pool, db.Decision{ID: "dec_bg", AccountID: "acct_bg", Cost: 7},
		db.Decision{ID: "dec_later", AccountID: "acct_later", Cost: 3})
	deadline := time.Now().Add(10 * time.Second)
	for {
		acct, err := db.GetAccount(ctx, pool, "acct_bg")
		if err != nil {
			t.Fatal(err)
		}
		if acct.Balance == -7 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("balance still %d after 10s of serve; want -7", acct.Balance)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The pass that billed it has finished once the waiting gauge shows the other decision.
	for {
		metrics := scrape(t, base)
		if sumSamples(metrics, "onceledger_reconcile_waiting_decisions") == 1 {
			if got := sumSamples(metrics, "onceledger_reconcile_billed_decisions_total"); got != 1 {
				t.Fatalf("billed decisions metric = %d, want 1", got)
			}
			if lastBilled := sumSamples(metrics, "onceledger_reconcile_last_billed_timestamp_seconds"); time.Since(time.Unix(lastBilled, 0)) > time.Minute {
				t.Fatalf("last billed timestamp %d is not recent", lastBilled)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics never showed one waiting decision:\n%s", metrics)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Missed webhooks, end to end: Stripe lists three top-up events whose delivery failed, one of which
// did reach the webhook after all. `reconcile --once` feeds each through the webhook's code path: two
// are credited, the third is a duplicate, and each payment is credited exactly once.
func TestReconcileRecoversMissedEventsThroughTheWebhookPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := databaseWithAccount(t, "acct_missed")
	event := func(n int) []byte {
		return fmt.Appendf(nil, `{"id":"evt_missed_%d","object":"event","type":"checkout.session.completed",
			"api_version":"2024-06-20","created":%d,"livemode":false,"pending_webhooks":1,
			"data":{"object":{"id":"cs_missed_%d","object":"checkout.session","payment_status":"paid",
			"amount_total":%d,"currency":"usd","payment_intent":"pi_missed_%d","metadata":{"account_id":"acct_missed"}}}}`,
			n, time.Now().Add(-time.Duration(n)*time.Hour).Unix(), n, n*100, n)
	}
	stripeAPI := stripefake.New()
	t.Cleanup(stripeAPI.Close)
	stripeAPI.SetEvents(event(1), event(2), event(3))

	// Event 2 reached the webhook after all.
	processor := &stripeevents.Processor{Pool: pool, Ledger: dbtest.Ledger(t, pool), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if res, err := processor.Process(ctx, event(2)); err != nil || !res.Credited {
		t.Fatalf("webhook delivery of event 2: %+v, %v", res, err)
	}

	vars := getenvFrom(map[string]string{"DATABASE_URL": url, "STRIPE_SECRET_KEY": stripefake.SecretKey, "STRIPE_API_BASE": stripeAPI.URL})
	stdout := &output{}
	if err := run(ctx, []string{"reconcile", "--once"}, vars, stdout, &output{}); err != nil {
		t.Fatalf("reconcile --once: %v\n%s", err, stdout)
	}
	if q := stripeAPI.EventQueries(); len(q) == 0 || q[0].Get("delivery_success") != "false" {
		t.Fatalf("Stripe was asked %v, want the events whose delivery failed", q)
	}
	var balance, topups int64
	if err := pool.QueryRow(ctx, `SELECT balance, (SELECT count(*) FROM ledger WHERE kind = 'topup') FROM accounts WHERE id = 'acct_missed'`).Scan(&balance, &topups); err != nil {
		t.Fatal(err)
	}
	if balance != 100+200+300 || topups != 3 {
		t.Fatalf("balance %d with %d top-ups, want 600 with 3\n%s", balance, topups, stdout)
	}
	// A second pass finds all three already processed.
	if err := run(ctx, []string{"reconcile", "--once"}, vars, &output{}, &output{}); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = 'acct_missed'`).Scan(&balance); err != nil || balance != 600 {
		t.Fatalf("after a second pass: balance %d, %v", balance, err)
	}
}

// storeDecisions stores decisions as POST /v1/decisions does (db.StoreDecisions), failing unless every
// one is new.
func storeDecisions(t *testing.T, pool *pgxpool.Pool, decisions ...db.Decision) {
	t.Helper()
	for i := range decisions {
		decisions[i].OccurredAt = time.Now()
	}
	stored, err := db.StoreDecisions(context.Background(), pool, decisions)
	if err != nil || stored.Accepted != len(decisions) {
		t.Fatalf("store %d decisions: %+v %v", len(decisions), stored, err)
	}
}
