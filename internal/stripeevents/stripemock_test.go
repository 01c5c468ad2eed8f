package stripeevents_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/stripeevents"
	"github.com/onceledger/onceledger/internal/stripemock"
)

// The refund list, exactly as charge.refunded asks for it, is a request Stripe's API accepts:
// stripe-mock answers 400 to a parameter it would refuse, which parks the event
// refund_list_unavailable.
func TestRefundListAcceptedByStripeMock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p := &stripeevents.Processor{Pool: pool, Ledger: dbtest.Ledger(t, pool), Stripe: stripeevents.NewStripeClient("sk_test_123", stripemock.Start(t), nil), Log: log}
	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_mock", "usd", 0); err != nil {
		t.Fatal(err)
	}
	paid, err := p.Process(ctx, event("evt_mock_paid", "checkout.session.completed", map[string]any{
		"id": "cs_mock", "object": "checkout.session", "payment_status": "paid", "amount_total": 1000,
		"currency": "usd", "payment_intent": "pi_mock", "metadata": map[string]any{"account_id": "acct_mock"},
	}))
	if err != nil || !paid.Credited {
		t.Fatalf("top-up: %+v %v", paid, err)
	}
	refunded, err := p.Process(ctx, event("evt_mock_refunded", "charge.refunded", map[string]any{
		"id": "ch_mock", "object": "charge", "amount": 1000, "amount_refunded": 100, "currency": "usd",
		"payment_intent": "pi_mock", "metadata": map[string]any{}, "status": "succeeded",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if refunded.Parked == stripeevents.ReasonRefundListUnavailable {
		t.Fatalf("stripe-mock refused the refund list: %+v", refunded)
	}
}
