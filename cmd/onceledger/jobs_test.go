package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/stripefake"
)

// serve works the jobs of every queue with its one River client: a debit through the API that takes
// an account below its recharge threshold enqueues the entry's notification (with the entry) and the
// recharge's PaymentIntent job (from the outbox), and the same client works both.
func TestServeWorksEveryQueueWithOneClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.URL(t)
	pool := openPool(t, url)
	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_jobs", "usd", 1000); err != nil {
		t.Fatal(err)
	}
	if err := db.SetStripeCustomer(ctx, pool, "acct_jobs", "cus_jobs"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetPaymentMethod(ctx, pool, "acct_jobs", "cus_jobs", "pm_jobs"); err != nil {
		t.Fatal(err)
	}
	threshold, amount := int64(100), int64(500)
	if _, err := db.SetRecharge(ctx, pool, "acct_jobs", db.RechargeSettings{Enabled: true, Threshold: &threshold, Amount: &amount}); err != nil {
		t.Fatal(err)
	}
	stripeAPI := stripefake.New()
	t.Cleanup(stripeAPI.Close)
	receiver := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(receiver.Close)
	base := startServe(t, map[string]string{
		"DATABASE_URL": url, "ONCELEDGER_API_KEYS": "jobs_key_onceledger_0000000000000", "NOTIFY_URL": receiver.URL, "NOTIFY_SECRET": "s",
		"STRIPE_SECRET_KEY": stripefake.SecretKey, "STRIPE_API_BASE": stripeAPI.URL,
	})

	req, err := http.NewRequest(http.MethodPost, base+"/v1/accounts/acct_jobs/adjustments", strings.NewReader(`{"amount":-950}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer jobs_key_onceledger_0000000000000")
	req.Header.Set("Idempotency-Key", "debit")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("debit answered %d", resp.StatusCode)
	}

	var kinds, clients int
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := pool.QueryRow(ctx, `SELECT count(DISTINCT kind), count(DISTINCT client) FROM river_job, unnest(attempted_by) AS client
			WHERE state = 'completed' AND kind IN ('entry_posted_notification', 'recharge_payment_intent')`).Scan(&kinds, &clients)
		if err != nil {
			t.Fatal(err)
		}
		if kinds == 2 || time.Now().After(deadline) {
			break
		}
	}
	if kinds != 2 || clients != 1 || len(stripeAPI.PaymentIntents()) != 1 {
		t.Fatalf("%d kinds of job worked by %d clients, %d PaymentIntents; want the notification and the recharge, by one client, one PaymentIntent",
			kinds, clients, len(stripeAPI.PaymentIntents()))
	}
}
