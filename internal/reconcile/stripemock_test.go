package reconcile_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/reconcile"
	"github.com/onceledger/onceledger/internal/stripeevents"
	"github.com/onceledger/onceledger/internal/stripefake"
	"github.com/onceledger/onceledger/internal/stripemock"
)

// The missed-events listing, exactly as recovery asks for it (every handled type, delivery_success,
// created range), is a request Stripe's API accepts: stripe-mock answers 400 to a parameter it would
// refuse (more than 20 types, say), which Recover returns.
func TestEventListAcceptedByStripeMock(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	sc := stripeevents.NewStripeClient("sk_test_123", stripemock.Start(t), nil)
	events := &stripeevents.Processor{Pool: pool, Ledger: dbtest.Ledger(t, pool), Stripe: sc, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	rep, err := reconcile.New(reconcile.Deps{Pool: pool, Ledger: dbtest.Ledger(t, pool), Stripe: sc, Events: events}, reconcile.Options{}).Recover(context.Background())
	if err != nil {
		t.Fatalf("stripe-mock refused the events list: %v", err)
	}
	if rep.Skipped != "" || rep.Listed == 0 {
		t.Fatalf("recovery did not list: %+v", rep)
	}
}

// Every request the drift pass makes is one Stripe's API accepts: the four listings with their created
// range, status and page size, and the retrievals by id of the objects the window's credits name (a
// topup's PaymentIntent, a failed refund's, a won dispute's), which stripe-mock answers with its
// fixtures. stripe-mock answers 400 to a parameter it would refuse, which CheckStripe returns.
func TestDriftRequestsAcceptedByStripeMock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	sc := stripeevents.NewStripeClient("sk_test_123", stripemock.Start(t), nil)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	events := &stripeevents.Processor{Pool: pool, Ledger: dbtest.Ledger(t, pool), Log: log}
	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_mock", "usd", 0); err != nil {
		t.Fatal(err)
	}
	for _, raw := range [][]byte{
		stripefake.Event("evt_mock_paid", "checkout.session.completed", "2024-06-20", map[string]any{
			"id": "cs_mock", "object": "checkout.session", "payment_status": "paid", "amount_total": 1000, "currency": "usd",
			"metadata": map[string]string{"account_id": "acct_mock"}, "payment_intent": "pi_mock",
		}),
		stripefake.Event("evt_mock_refund", "refund.failed", "2024-06-20", map[string]any{
			"id": "re_mock", "object": "refund", "amount": 100, "currency": "usd", "status": "failed", "payment_intent": "pi_mock",
		}),
		stripefake.Event("evt_mock_dispute", "charge.dispute.closed", "2024-06-20", map[string]any{
			"id": "dp_mock", "object": "dispute", "amount": 200, "currency": "usd", "status": "won", "payment_intent": "pi_mock",
		}),
	} {
		if res, err := events.Process(ctx, raw); err != nil || res.Outcome != stripeevents.OutcomeApplied {
			t.Fatalf("deliver: %+v %v", res, err)
		}
	}
	r := reconcile.New(reconcile.Deps{Pool: pool, Stripe: sc, Events: events}, reconcile.Options{})
	now := time.Now()
	rep, err := r.CheckStripe(ctx, now.Add(-24*time.Hour), now.Add(time.Minute))
	if err != nil {
		t.Fatalf("stripe-mock refused a request of the drift pass: %v", err)
	}
	if rep.Listed == 0 || rep.Credits != 3 || rep.Retrieved != 3 {
		t.Fatalf("report %+v; want listings, and the three credits' objects fetched by id", rep)
	}
}
