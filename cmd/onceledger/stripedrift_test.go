package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/stripeevents"
	"github.com/onceledger/onceledger/internal/stripefake"
)

// driftFixture is a payment credited through the webhook's processor, and a refund of it Stripe holds
// but the webhook never delivered, all created at created.
func driftFixture(t *testing.T, account string, created time.Time) (url string, stripeAPI *stripefake.Server, deliverRefund func()) {
	t.Helper()
	url, pool := databaseWithAccount(t, account)
	stripeAPI = stripefake.New()
	t.Cleanup(stripeAPI.Close)
	at := created.Unix()
	session := map[string]any{
		"id": "cs_drift", "object": "checkout.session", "status": "complete", "payment_status": "paid", "amount_total": 1200,
		"currency": "usd", "metadata": map[string]string{"account_id": account}, "payment_intent": "pi_drift", "created": at,
	}
	refund := map[string]any{
		"id": "re_drift", "object": "refund", "amount": 200, "currency": "usd", "status": "succeeded",
		"payment_intent": "pi_drift", "created": at + 60,
	}
	stripeAPI.SetObjects("/v1/checkout/sessions", session)
	stripeAPI.SetObjects("/v1/payment_intents", map[string]any{
		"id": "pi_drift", "object": "payment_intent", "status": "succeeded", "amount": 1200, "currency": "usd", "created": at,
	})
	stripeAPI.SetObjects("/v1/refunds", refund)
	processor := &stripeevents.Processor{Pool: pool, Ledger: dbtest.Ledger(t, pool), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	deliver := func(eventID, eventType string, object map[string]any) {
		t.Helper()
		if res, err := processor.Process(context.Background(), stripefake.Event(eventID, eventType, "2024-06-20", object)); err != nil || res.Outcome != stripeevents.OutcomeApplied {
			t.Fatalf("deliver %s: %+v %v", eventID, res, err)
		}
	}
	deliver("evt_drift_paid", "checkout.session.completed", session)
	return url, stripeAPI, func() { deliver("evt_drift_refund", "refund.updated", refund) }
}

// `reconcile --stripe` over a window prints what differs and exits non-zero; once the refund's event
// arrives, the same window is clean and checkpointed, and it exits zero.
func TestReconcileStripeReportsDriftThenTheCheckpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Now()
	url, stripeAPI, deliverRefund := driftFixture(t, "acct_drift", now.Add(-time.Hour))
	vars := getenvFrom(map[string]string{"DATABASE_URL": url, "STRIPE_SECRET_KEY": stripefake.SecretKey, "STRIPE_API_BASE": stripeAPI.URL})
	window := []string{"reconcile", "--stripe", "--since", now.Add(-2 * time.Hour).UTC().Format(time.RFC3339),
		"--until", now.Add(time.Minute).UTC().Format(time.RFC3339)}

	stdout := &output{}
	if err := run(ctx, window, vars, stdout, &output{}); !errors.Is(err, errDrift) || exitCode(err) != 1 {
		t.Fatalf("reconcile --stripe with drift: %v (exit %d), want errDrift\n%s", err, exitCode(err), stdout)
	}
	for _, want := range []string{"listed 3 objects", "checked 1 payments, 1 refunds", "1 drift found",
		"missing_refund re_drift on acct_drift: refund 200 usd (succeeded) at Stripe, nothing taken back"} {
		if !strings.Contains(stdout.String(), want) {
			t.Fatalf("reconcile --stripe printed:\n%s\nwant %q in it", stdout, want)
		}
	}

	deliverRefund()
	stdout = &output{}
	if err := run(ctx, window, vars, stdout, &output{}); err != nil {
		t.Fatalf("reconcile --stripe after the refund: %v\n%s", err, stdout)
	}
	for _, want := range []string{"0 drift found, 1 resolved", "clean: checkpoint of 2 objects and 1 credits, digest "} {
		if !strings.Contains(stdout.String(), want) {
			t.Fatalf("reconcile --stripe printed:\n%s\nwant %q in it", stdout, want)
		}
	}
}

// --since and --until are checked before anything runs, and belong to --stripe.
func TestReconcileStripeWindowFlags(t *testing.T) {
	t.Parallel()
	vars := getenvFrom(map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none"})
	for _, args := range [][]string{
		{"reconcile", "--since", "2026-01-01"},
		{"reconcile", "--stripe", "--since", "yesterday"},
		{"reconcile", "--stripe", "--since", "2026-01-02", "--until", "2026-01-01"},
	} {
		if err := run(context.Background(), args, vars, &output{}, &output{}); exitCode(err) != 2 {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// serve runs the drift pass on its own schedule, over the complete days of the last week: a refund of
// yesterday that never reached the ledger shows in onceledger_stripe_drift.
func TestServeChecksStripeDriftInTheBackground(t *testing.T) {
	t.Parallel()
	yesterdayNoon := time.Now().Add(-time.Hour).UTC().Truncate(24 * time.Hour).Add(-12 * time.Hour)
	url, stripeAPI, _ := driftFixture(t, "acct_drift_bg", yesterdayNoon)
	base := startServe(t, map[string]string{
		"DATABASE_URL": url, "STRIPE_SECRET_KEY": stripefake.SecretKey, "STRIPE_API_BASE": stripeAPI.URL,
		"STRIPE_RECONCILE_INTERVAL": "1h",
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		metrics := scrape(t, base)
		if sumSamples(metrics, `onceledger_stripe_drift\{reason="missing_refund"\}`) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics never showed the missing refund:\n%s", metrics)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
