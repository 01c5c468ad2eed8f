package stripeevents_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/stripeevents"
)

// inMode is event with livemode set as Stripe renders it.
func inMode(live bool, id, eventType string, object map[string]any) []byte {
	var ev map[string]any
	if err := json.Unmarshal(event(id, eventType, object), &ev); err != nil {
		panic(err)
	}
	ev["livemode"] = live
	body, err := json.Marshal(ev)
	if err != nil {
		panic(err)
	}
	return body
}

// A test-mode payment reaching a live deployment credits nothing and is parked livemode_mismatch, and
// so is a test-mode refund; the live payment of the same shape is credited. A deployment that does not
// know its mode accepts both.
func TestTestModePaymentOnLiveDeploymentParks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_live", "usd", 0); err != nil {
		t.Fatal(err)
	}
	live := true
	p := &stripeevents.Processor{Pool: pool, Ledger: dbtest.Ledger(t, pool), Livemode: &live, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	session := func(id, paymentIntent string) map[string]any {
		return map[string]any{
			"id": id, "object": "checkout.session", "payment_status": "paid", "amount_total": 1000,
			"currency": "usd", "payment_intent": paymentIntent, "metadata": map[string]any{"account_id": "acct_live"},
		}
	}

	testPay, err := p.Process(ctx, inMode(false, "evt_test_pay", "checkout.session.completed", session("cs_test", "pi_test")))
	if err != nil {
		t.Fatal(err)
	}
	if testPay.Credited || testPay.Parked != stripeevents.ReasonLivemodeMismatch {
		t.Fatalf("test-mode payment on a live deployment: %+v", testPay)
	}
	wantBalance(t, pool, "acct_live", 0)
	if _, err := db.TopupBySession(ctx, pool, "cs_test"); err == nil {
		t.Fatal("a test-mode payment recorded an order")
	}

	livePay, err := p.Process(ctx, inMode(true, "evt_live_pay", "checkout.session.completed", session("cs_live", "pi_live")))
	if err != nil || !livePay.Credited {
		t.Fatalf("live payment: %+v %v", livePay, err)
	}
	testRefund, err := p.Process(ctx, inMode(false, "evt_test_refund", "refund.created", map[string]any{
		"id": "re_test", "object": "refund", "amount": 1000, "currency": "usd", "status": "succeeded", "payment_intent": "pi_live",
	}))
	if err != nil || testRefund.Reversed != 0 || testRefund.Parked != stripeevents.ReasonLivemodeMismatch {
		t.Fatalf("test-mode refund of a live payment: %+v %v", testRefund, err)
	}
	wantBalance(t, pool, "acct_live", 1000)

	// Replaying the parked event on the same deployment still moves nothing.
	replayed, err := p.Replay(ctx, "evt_test_pay")
	if err != nil || replayed.Parked != stripeevents.ReasonLivemodeMismatch {
		t.Fatalf("replay: %+v %v", replayed, err)
	}
	wantBalance(t, pool, "acct_live", 1000)

	either := &stripeevents.Processor{Pool: pool, Ledger: dbtest.Ledger(t, pool), Log: p.Log}
	if res, err := either.Process(ctx, inMode(false, "evt_test_pay_2", "checkout.session.completed", session("cs_test_2", "pi_test_2"))); err != nil || !res.Credited {
		t.Fatalf("a deployment of unknown mode refused a test payment: %+v %v", res, err)
	}
	wantBalance(t, pool, "acct_live", 2000)
}

func wantBalance(t *testing.T, pool db.Conn, account string, want int64) {
	t.Helper()
	acct, err := db.GetAccount(context.Background(), pool, account)
	if err != nil {
		t.Fatal(err)
	}
	if acct.Balance != want {
		t.Fatalf("balance of %s is %d, want %d", account, acct.Balance, want)
	}
}
