package api

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/config"
	"github.com/onceledger/onceledger/internal/reconcile"
	"github.com/onceledger/onceledger/internal/stripeevents"
	"github.com/onceledger/onceledger/internal/stripefake"
)

// GET /v1/reports/stripe-drift shows what the drift pass recorded, as the document describes it: a
// refund the webhook never delivered is open drift; once delivered, the next pass resolves it and
// checkpoints the window.
func TestStripeDriftReport(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	fake := stripefake.New()
	t.Cleanup(fake.Close)
	const secret = "whsec_drift_report"
	s := newServerOn(t, pool, func(c *config.Config) {
		c.WebhookSecrets, c.StripeSecretKey, c.StripeAPIBase = []string{secret}, stripefake.SecretKey, fake.URL
	})
	deliver := func(eventID, eventType string, object map[string]any) {
		t.Helper()
		body := stripefake.Event(eventID, eventType, "2024-06-20", object)
		req, err := http.NewRequest(http.MethodPost, s.url+"/webhooks/stripe", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Stripe-Signature", stripefake.Sign(body, secret, time.Now()))
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("deliver %s: %v %v", eventID, resp, err)
		}
		resp.Body.Close()
	}
	r := reconcile.New(reconcile.Deps{Pool: pool, Stripe: stripeevents.NewStripeClient(stripefake.SecretKey, fake.URL, nil)}, reconcile.Options{})
	now := time.Now()
	since, until := now.Add(-time.Hour), now.Add(time.Hour)
	check := func() {
		t.Helper()
		if _, err := r.CheckStripe(ctx, since, until); err != nil {
			t.Fatal(err)
		}
	}

	empty := s.call(http.MethodGet, "/v1/reports/stripe-drift", nil).want(t, http.StatusOK, "")
	if len(empty.JSON["open"].([]any)) != 0 || len(empty.JSON["checkpoints"].([]any)) != 0 {
		t.Fatalf("a new deployment reports %s", empty.Body)
	}

	s.createAccount("acct_report", "usd", 0)
	at := now.Add(-10 * time.Minute).Unix()
	session := map[string]any{
		"id": "cs_report", "object": "checkout.session", "status": "complete", "payment_status": "paid", "amount_total": 900,
		"currency": "usd", "metadata": map[string]string{"account_id": "acct_report"}, "payment_intent": "pi_report", "created": at,
	}
	refund := map[string]any{
		"id": "re_report", "object": "refund", "amount": 250, "currency": "usd", "status": "succeeded",
		"payment_intent": "pi_report", "created": at + 1,
	}
	fake.SetObjects("/v1/checkout/sessions", session)
	fake.SetObjects("/v1/refunds", refund)
	deliver("evt_report_paid", "checkout.session.completed", session)
	check()

	got := s.call(http.MethodGet, "/v1/reports/stripe-drift", nil).want(t, http.StatusOK, "")
	open := got.JSON["open"].([]any)
	if len(open) != 1 {
		t.Fatalf("open drift %s, want the refund", got.Body)
	}
	d := open[0].(map[string]any)
	if d["reason"] != "missing_refund" || d["object_id"] != "re_report" || d["account_id"] != "acct_report" ||
		d["stripe_amount"] != 250.0 || d["ledger_amount"] != nil || d["resolved_at"] != nil {
		t.Fatalf("open drift %v", d)
	}

	deliver("evt_report_refund", "charge.refund.updated", refund)
	check()
	got = s.call(http.MethodGet, "/v1/reports/stripe-drift", nil).want(t, http.StatusOK, "")
	resolved, checkpoints := got.JSON["resolved"].([]any), got.JSON["checkpoints"].([]any)
	if len(got.JSON["open"].([]any)) != 0 || len(resolved) != 1 || resolved[0].(map[string]any)["resolved_at"] == nil {
		t.Fatalf("after the refund: %s", got.Body)
	}
	if len(checkpoints) != 1 {
		t.Fatalf("checkpoints %v, want the clean window's", checkpoints)
	}
	c := checkpoints[0].(map[string]any)
	start, err := time.Parse(time.RFC3339, c["window_start"].(string))
	if err != nil || c["objects"] != 2.0 || c["credits"] != 1.0 || !start.Equal(since.Truncate(time.Second)) {
		t.Fatalf("checkpoint %v (%v); want 2 objects (the payment, the refund) and 1 credit over the window", c, err)
	}
}
