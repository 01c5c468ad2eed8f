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

func event(id, eventType string, object map[string]any) []byte {
	body, err := json.Marshal(map[string]any{
		"id": id, "object": "event", "type": eventType, "api_version": "2024-06-20", "created": 1767225600,
		"livemode": false, "data": map[string]any{"object": object},
	})
	if err != nil {
		panic(err)
	}
	return body
}

// A refund or dispute finds its account through the paid top-up of its payment_intent (its own
// metadata is empty in real payloads), else through its charge's metadata.account_id when the payload
// carries the charge expanded; with neither it is parked unknown_payment, and moves nothing.
func TestRefundFindsItsAccount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	for _, id := range []string{"acct_paid", "acct_charge"} {
		if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, id, "usd", 0); err != nil {
			t.Fatal(err)
		}
	}
	p := &stripeevents.Processor{Pool: pool, Ledger: dbtest.Ledger(t, pool), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	paid, err := p.Process(ctx, event("evt_paid", "checkout.session.completed", map[string]any{
		"id": "cs_1", "object": "checkout.session", "payment_status": "paid", "amount_total": 1000,
		"currency": "usd", "payment_intent": "pi_paid", "metadata": map[string]any{"account_id": "acct_paid"},
	}))
	if err != nil || !paid.Credited {
		t.Fatalf("top-up: %+v %v", paid, err)
	}

	chargeNaming := func(account string) map[string]any {
		return map[string]any{"id": "ch_x", "object": "charge", "metadata": map[string]any{"account_id": account}}
	}
	cases := []struct {
		name          string
		paymentIntent any
		charge        any
		wantParked    string
		wantAccount   string
	}{
		{"the top-up's payment wins over the charge", "pi_paid", chargeNaming("acct_charge"), "", "acct_paid"},
		{"the top-up's payment, charge not expanded", "pi_paid", "ch_x", "", "acct_paid"},
		{"an unknown payment: the charge's metadata", "pi_elsewhere", chargeNaming("acct_charge"), "", "acct_charge"},
		{"no payment: the charge's metadata", nil, chargeNaming("acct_charge"), "", "acct_charge"},
		{"an unknown payment and no account on the charge", "pi_elsewhere", "ch_x", stripeevents.ReasonUnknownPayment, ""},
		{"a charge naming no account", "pi_elsewhere", chargeNaming(""), stripeevents.ReasonUnknownPayment, ""},
		{"the charge names an account that does not exist", "pi_elsewhere", chargeNaming("acct_nobody"), stripeevents.ReasonUnknownAccount, ""},
	}
	balances := map[string]int64{"acct_paid": 1000, "acct_charge": 0}
	for i, c := range cases {
		refundID := "re_" + string(rune('a'+i))
		res, err := p.Process(ctx, event("evt_refund_"+refundID, "refund.created", map[string]any{
			"id": refundID, "object": "refund", "amount": 100, "currency": "usd", "status": "succeeded",
			"payment_intent": c.paymentIntent, "charge": c.charge, "metadata": map[string]any{},
		}))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if res.Parked != c.wantParked || (c.wantParked == "") != (res.Reversed == 1) {
			t.Errorf("%s: %+v, want parked %q", c.name, res, c.wantParked)
		}
		if c.wantAccount != "" {
			balances[c.wantAccount] -= 100
		}
		for id, want := range balances {
			acct, err := db.GetAccount(ctx, pool, id)
			if err != nil {
				t.Fatal(err)
			}
			if acct.Balance != want {
				t.Errorf("%s: balance of %s is %d, want %d", c.name, id, acct.Balance, want)
				balances[id] = acct.Balance
			}
		}
	}
}
