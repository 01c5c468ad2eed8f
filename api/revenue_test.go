package api

import (
	"net/http"
	"testing"

	"github.com/onceledger/onceledger/internal/config"
)

// An account counted in credits buys them at an order's price, in any currency: the credit is exactly
// the order's credits, its lot costs the price, and only a payment of exactly that price and currency
// pays it. Both webhook paths: a payment in the account's currency (the happy path) and one in
// another currency (the general path).
func TestPricedTopupsOnAnAccountCountedInCredits(t *testing.T) {
	t.Parallel()
	const secret = "whsec_test_priced"
	var s *server
	stripe, _ := newStripeStandIn(t, func() *server { return s })
	s = newServer(t, withStripe(stripe.URL), func(c *config.Config) { c.WebhookSecrets = []string{secret} })
	got := s.call(http.MethodPut, "/v1/accounts/acct_cr", map[string]any{"currency": "usd", "unit": "credits"}).want(t, http.StatusCreated, "")
	if got.JSON["account"].(map[string]any)["unit"] != "credits" {
		t.Fatalf("account: %s", got.Body)
	}

	order := func(body map[string]any) (id, session string) {
		body["success_url"] = "https://example.com/ok"
		topup := s.call(http.MethodPost, "/v1/accounts/acct_cr/topups", body).want(t, http.StatusCreated, "").JSON["topup"].(map[string]any)
		if topup["credits"] != body["credits"] || topup["amount"] != body["amount"] {
			t.Fatalf("top-up %v for %v", topup, body)
		}
		return topup["id"].(string), topup["session_id"].(string)
	}
	complete := func(eventID, id, session, pi string, paid int64, currency string) reply {
		body, signature := signedEvent(t, secret, eventID, "checkout.session.completed", map[string]any{
			"id": session, "object": "checkout.session", "payment_status": "paid", "status": "complete",
			"amount_total": paid, "currency": currency, "payment_intent": pi, "client_reference_id": "acct_cr",
			"metadata": map[string]any{"account_id": "acct_cr", "topup_id": id},
		})
		return s.call(http.MethodPost, "/webhooks/stripe", body, "Stripe-Signature", signature, "Authorization", "")
	}

	usdID, usdSession := order(map[string]any{"amount": float64(333), "credits": float64(1000)})
	eurID, eurSession := order(map[string]any{"amount": float64(250), "credits": float64(600), "currency": "eur"})
	if form := stripe.Sessions()[1]; form.Get("line_items[0][price_data][currency]") != "eur" || form.Get("line_items[0][price_data][unit_amount]") != "250" {
		t.Fatalf("Checkout Session of the eur order: %v", form)
	}

	// Another amount than the order's price pays nothing (parked).
	if r := complete("evt_cr_short", eurID, eurSession, "pi_cr_2", 249, "eur").want(t, http.StatusOK, ""); r.JSON["credited"] != false {
		t.Fatalf("a short payment: %s", r.Body)
	}
	s.wantMoney("acct_cr", 0, 0)

	if r := complete("evt_cr_usd", usdID, usdSession, "pi_cr_1", 333, "usd").want(t, http.StatusOK, ""); r.JSON["credited"] != true {
		t.Fatalf("usd payment: %s", r.Body)
	}
	s.wantMoney("acct_cr", 1000, 1)
	if r := complete("evt_cr_eur", eurID+"x", "cs_unknown", "pi_cr_3", 250, "eur").want(t, http.StatusOK, ""); r.JSON["credited"] != false {
		t.Fatalf("a session without an order in another currency than the account's: %s", r.Body)
	}
	s.wantMoney("acct_cr", 1000, 1)

	// The lots cost their order's price, in its currency.
	if n := s.count(`SELECT count(*) FROM credit_lots WHERE account_id = 'acct_cr' AND amount = 1000 AND cost_amount = 333 AND cost_currency = 'usd'`); n != 1 {
		t.Fatalf("%d lots of 1000 credits costing 333 usd, want 1", n)
	}
	// Spending half of the usd lot recognises floor(333 * 500 / 1000).
	s.call(http.MethodPost, "/v1/accounts/acct_cr/adjustments", map[string]any{"amount": -500}, "Idempotency-Key", "spend").
		want(t, http.StatusCreated, "")
	if n := s.count(`SELECT sum(amount) FROM revenue_recognitions WHERE account_id = 'acct_cr' AND kind = 'recognised'`); n != 166 {
		t.Fatalf("recognised %d, want 166", n)
	}
}

// Bad priced top-ups and accounts are refused naming the field, and nothing is written; an account
// counted in credits takes no recharge settings (they would buy credits 1:1).
func TestPricedTopupsRefuseBadInput(t *testing.T) {
	t.Parallel()
	var s *server
	stripe, _ := newStripeStandIn(t, func() *server { return s })
	s = newServer(t, withStripe(stripe.URL))
	s.createAccount("acct_usd", "usd", 0)
	s.call(http.MethodPut, "/v1/accounts/acct_cr", map[string]any{"currency": "usd", "unit": "credits"}).want(t, http.StatusCreated, "")

	for _, c := range []struct {
		name, account, body, code string
	}{
		{"zero credits", "acct_cr", `{"amount":100,"credits":0}`, "invalid_credits"},
		{"negative credits", "acct_cr", `{"amount":100,"credits":-5}`, "invalid_credits"},
		{"credits above 10^15", "acct_cr", `{"amount":100,"credits":1000000000000001}`, "invalid_credits"},
		{"credits beyond a bigint", "acct_cr", `{"amount":100,"credits":99999999999999999999}`, "invalid_credits"},
		{"credits not a number", "acct_cr", `{"amount":100,"credits":"7"}`, "invalid_credits"},
		{"upper-case currency", "acct_cr", `{"amount":100,"currency":"EUR"}`, "invalid_currency"},
		{"another currency on an account counted in its currency", "acct_usd", `{"amount":100,"credits":200,"currency":"eur"}`, "invalid_currency"},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := c.body[:len(c.body)-1] + `,"success_url":"https://example.com/ok"}`
			s.call(http.MethodPost, "/v1/accounts/"+c.account+"/topups", body).want(t, http.StatusBadRequest, c.code)
		})
	}
	if n := s.count(`SELECT count(*) FROM topups`); n != 0 {
		t.Fatalf("%d orders written", n)
	}
	s.call(http.MethodPut, "/v1/accounts/acct_pts", map[string]any{"currency": "usd", "unit": "points"}).want(t, http.StatusBadRequest, "invalid_unit")
	s.call(http.MethodPut, "/v1/accounts/acct_cr", map[string]any{"currency": "usd"}).want(t, http.StatusConflict, "currency_mismatch")
	s.call(http.MethodPut, "/v1/accounts/acct_cr/recharge", map[string]any{"threshold": 100, "amount": 500, "enabled": false}).
		want(t, http.StatusBadRequest, "invalid_unit")
	if n := s.count(`SELECT count(*) FROM accounts WHERE id = 'acct_pts' OR recharge_threshold IS NOT NULL`); n != 0 {
		t.Fatalf("%d accounts written", n)
	}
	// A plain account's top-up may name its own currency and credits 1:1 by default.
	got := s.call(http.MethodPost, "/v1/accounts/acct_usd/topups", map[string]any{"amount": 700, "currency": "usd", "success_url": "https://example.com/ok"}).
		want(t, http.StatusCreated, "")
	if topup := got.JSON["topup"].(map[string]any); topup["credits"] != float64(700) {
		t.Fatalf("top-up: %s", got.Body)
	}
}

// An adjustment may name what its credit cost; a replay under its key with another cost is the usual
// idempotency conflict, and bad costs are refused naming the field.
func TestAdjustmentCost(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_a", "usd", 0)
	adjust := func(key string, body map[string]any) reply {
		return s.call(http.MethodPost, "/v1/accounts/acct_a/adjustments", body, "Idempotency-Key", key)
	}
	paid := map[string]any{"amount": 300, "category": "paid", "cost_amount": 100, "cost_currency": "usd"}
	adjust("k1", paid).want(t, http.StatusCreated, "")
	adjust("k1", paid).want(t, http.StatusOK, "")
	adjust("k1", map[string]any{"amount": 300, "category": "paid", "cost_amount": 101, "cost_currency": "usd"}).
		want(t, http.StatusConflict, "idempotency_conflict")
	adjust("k1", map[string]any{"amount": 300, "category": "paid"}).want(t, http.StatusConflict, "idempotency_conflict")
	for _, c := range []struct {
		body map[string]any
		code string
	}{
		{map[string]any{"amount": 5, "category": "paid", "cost_amount": -1, "cost_currency": "usd"}, "invalid_cost_amount"},
		{map[string]any{"amount": 5, "category": "paid", "cost_currency": "usd"}, "invalid_cost_amount"},
		{map[string]any{"amount": 5, "category": "paid", "cost_amount": 1}, "invalid_cost_currency"},
		{map[string]any{"amount": 5, "category": "paid", "cost_amount": 1, "cost_currency": "US"}, "invalid_cost_currency"},
		{map[string]any{"amount": 5, "cost_amount": 1, "cost_currency": "usd"}, "invalid_cost_amount"},
		{map[string]any{"amount": -5, "cost_amount": 0, "cost_currency": "usd"}, "invalid_cost_amount"},
	} {
		adjust("bad", c.body).want(t, http.StatusBadRequest, c.code)
	}
	s.wantMoney("acct_a", 300, 1)
	if n := s.count(`SELECT count(*) FROM credit_lots WHERE account_id = 'acct_a' AND cost_amount = 100 AND cost_currency = 'usd'`); n != 1 {
		t.Fatalf("%d lots costing 100 usd, want 1", n)
	}
}
