package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/onceledger/onceledger/internal/stripefake"
)

// postEvent delivers body to serve's webhook, signed now, and returns the status and answer.
func postEvent(t *testing.T, base string, body []byte) (int, map[string]any) {
	t.Helper()
	status, answer, err := deliverOnceAnswer(&http.Client{Timeout: 10 * time.Second}, base, body)
	if err != nil {
		t.Fatal(err)
	}
	return status, answer
}

// A charge.refunded parked before its payment needs the refund list from Stripe. With Stripe down, the
// payment's checkout.session.completed still answers 200 and credits (the list is not fetched under the
// top-up's lock); the refund is re-applied by a job after commit, once Stripe is back, exactly once.
func TestParkedRefundDoesNotHoldTheCreditWhileStripeIsDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := databaseWithAccount(t, "acct_down")
	stripeAPI := stripefake.New()
	t.Cleanup(stripeAPI.Close)
	stripeAPI.SetRefunds("ch_down", map[string]any{
		"id": "re_down", "object": "refund", "amount": 300, "currency": "usd", "status": "succeeded",
		"charge": "ch_down", "payment_intent": "pi_down",
	})
	base := startServe(t, map[string]string{
		"DATABASE_URL": url, "STRIPE_WEBHOOK_SECRET": loadSecret,
		"STRIPE_SECRET_KEY": stripefake.SecretKey, "STRIPE_API_BASE": stripeAPI.URL,
	})
	refunded := stripeEvent("evt_refunded", "charge.refunded", map[string]any{
		"id": "ch_down", "object": "charge", "amount": 1000, "amount_refunded": 300, "currency": "usd",
		"payment_intent": "pi_down", "metadata": map[string]any{},
	})
	if status, answer := postEvent(t, base, refunded); status != http.StatusOK || answer["parked"] != "unknown_payment" {
		t.Fatalf("refund before its payment: %d %v", status, answer)
	}

	stripeAPI.FailWith(http.StatusServiceUnavailable)
	calls := stripeAPI.Calls()
	topup := stripeEvent("evt_paid", "checkout.session.completed", map[string]any{
		"id": "cs_down", "object": "checkout.session", "payment_status": "paid", "amount_total": 1000,
		"currency": "usd", "payment_intent": "pi_down", "metadata": map[string]any{"account_id": "acct_down"},
	})
	status, answer := postEvent(t, base, topup)
	if status != http.StatusOK || answer["credited"] != true || answer["reversed"] != float64(0) {
		t.Fatalf("payment with Stripe down: %d %v", status, answer)
	}
	var balance int64
	if err := pool.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = 'acct_down'`).Scan(&balance); err != nil || balance != 1000 {
		t.Fatalf("balance %d after the credit, want 1000 (%v)", balance, err)
	}
	// The job tried (and failed) at least once while Stripe was down, or is waiting for its turn.
	for deadline := time.Now().Add(5 * time.Second); stripeAPI.Calls() == calls && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	stripeAPI.FailWith(0)

	var refunds int
	var outcome string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		err := pool.QueryRow(ctx, `SELECT (SELECT balance FROM accounts WHERE id = 'acct_down'),
			(SELECT count(*) FROM ledger WHERE account_id = 'acct_down' AND dedupe_key = 'stripe:refund:re_down'),
			(SELECT outcome FROM stripe_events WHERE event_id = 'evt_refunded')`).Scan(&balance, &refunds, &outcome)
		if err != nil {
			t.Fatal(err)
		}
		// All three, not the outcome alone: on Citus the three reads are separate statements, on nodes
		// that see the job's commit one after the other.
		if outcome == "applied" && balance == 700 && refunds == 1 {
			break
		}
	}
	if outcome != "applied" || balance != 700 || refunds != 1 {
		t.Fatalf("once Stripe was back: refund event %s, balance %d, %d refund entries; want applied, 700, 1", outcome, balance, refunds)
	}
	// Redelivering both, and replaying the refund, posts nothing more.
	for _, body := range [][]byte{refunded, topup} {
		if status, answer := postEvent(t, base, body); status != http.StatusOK || answer["duplicate"] != true {
			t.Fatalf("redelivery: %d %v", status, answer)
		}
	}
	if err := run(ctx, []string{"replay", "evt_refunded"}, getenvFrom(map[string]string{
		"DATABASE_URL": url, "STRIPE_SECRET_KEY": stripefake.SecretKey, "STRIPE_API_BASE": stripeAPI.URL,
	}), &output{}, &output{}); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT balance, (SELECT count(*) FROM ledger WHERE account_id = 'acct_down') FROM accounts WHERE id = 'acct_down'`).Scan(&balance, &refunds); err != nil || balance != 700 || refunds != 2 {
		t.Fatalf("after redeliveries and a replay: balance %d, %d entries (%v); want 700, 2", balance, refunds, err)
	}
}
