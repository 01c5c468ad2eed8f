package stripeevents_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/stripeevents"
	"github.com/onceledger/onceledger/internal/stripefake"
)

// A refund or dispute rendered by an older API version names only its charge. With an API key its
// payment is found through the charge (retrieved before the transaction) and the money moves, also when
// it arrived before the payment (parked under the payment, then re-applied by the top-up); with Stripe
// down it is a retryable failure with nothing written; without a key it parks unknown_payment, as it
// always did.
func TestChargeOnlyRefundFindsItsPayment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_old", "usd", 0); err != nil {
		t.Fatal(err)
	}
	stripeAPI := stripefake.New()
	t.Cleanup(stripeAPI.Close)
	stripeAPI.SetCharge("ch_old", "pi_old")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p := &stripeevents.Processor{Pool: pool, Ledger: dbtest.Ledger(t, pool), Stripe: stripeevents.NewStripeClient(stripefake.SecretKey, stripeAPI.URL, nil), Log: log}
	withoutKey := &stripeevents.Processor{Pool: pool, Ledger: dbtest.Ledger(t, pool), Log: log}
	refund := func(id string, amount int) []byte {
		return event("evt_"+id, "refund.created", map[string]any{
			"id": id, "object": "refund", "amount": amount, "currency": "usd", "status": "succeeded", "charge": "ch_old",
		})
	}
	dispute := event("evt_du_old", "charge.dispute.created", map[string]any{
		"id": "du_old", "object": "dispute", "amount": 200, "currency": "usd", "status": "needs_response", "charge": "ch_old",
	})

	// Before its payment: parked under the payment the charge names.
	early, err := p.Process(ctx, refund("re_early", 100))
	if err != nil || early.Parked != stripeevents.ReasonUnknownPayment {
		t.Fatalf("refund before its payment: %+v %v", early, err)
	}
	paid, err := p.Process(ctx, event("evt_paid_old", "checkout.session.completed", map[string]any{
		"id": "cs_old", "object": "checkout.session", "payment_status": "paid", "amount_total": 1000,
		"currency": "usd", "payment_intent": "pi_old", "metadata": map[string]any{"account_id": "acct_old"},
	}))
	if err != nil || !paid.Credited || paid.Reversed != 1 {
		t.Fatalf("payment re-applying the early refund: %+v %v", paid, err)
	}
	wantBalance(t, pool, "acct_old", 900)

	if res, err := p.Process(ctx, dispute); err != nil || res.Reversed != 1 {
		t.Fatalf("charge-only dispute: %+v %v", res, err)
	}
	wantBalance(t, pool, "acct_old", 700)

	stripeAPI.FailWith(http.StatusServiceUnavailable)
	if _, err := p.Process(ctx, refund("re_down", 50)); err == nil {
		t.Fatal("Stripe down: a charge-only refund was processed without its payment")
	}
	stripeAPI.FailWith(0)
	if recorded, err := db.EventRecorded(ctx, pool, "evt_re_down"); err != nil || recorded {
		t.Fatalf("Stripe down: the event was recorded (%v)", err)
	}

	if res, err := withoutKey.Process(ctx, refund("re_nokey", 50)); err != nil || res.Parked != stripeevents.ReasonUnknownPayment {
		t.Fatalf("charge-only refund without a key: %+v %v", res, err)
	}
	wantBalance(t, pool, "acct_old", 700)
	// Replayed once a key is configured, it finds its payment.
	if res, err := p.Replay(ctx, "evt_re_nokey"); err != nil || res.Reversed != 1 {
		t.Fatalf("replay with a key: %+v %v", res, err)
	}
	wantBalance(t, pool, "acct_old", 650)
}
