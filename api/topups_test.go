package api

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/config"
	"github.com/onceledger/onceledger/internal/stripefake"
)

// newStripeStandIn starts the Stripe stand-in for the server s returns; seen receives, for each
// Checkout Session request, the status of the top-up row it names as it stood when Stripe was called
// ("" when there was none).
func newStripeStandIn(t *testing.T, s func() *server) (stripe *stripefake.Server, seen <-chan string) {
	rowSeen := make(chan string, 16)
	stripe = stripefake.New()
	t.Cleanup(stripe.Close)
	stripe.OnCheckoutSession = func(form url.Values) {
		var status string
		if row, err := db.GetTopup(context.Background(), s().pool, form.Get("metadata[topup_id]")); err == nil {
			status = row.Status
		}
		rowSeen <- status
	}
	return stripe, rowSeen
}

func withStripe(base string) func(*config.Config) {
	return func(c *config.Config) {
		c.StripeSecretKey = "sk_test_local"
		c.StripeAPIBase = base
	}
}

func TestTopupCreatesCheckoutSessionForAPendingOrder(t *testing.T) {
	t.Parallel()
	var s *server
	stripe, rowSeen := newStripeStandIn(t, func() *server { return s })
	s = newServer(t, withStripe(stripe.URL))
	s.createAccount("acct_t", "eur", 0)

	got := s.call(http.MethodPost, "/v1/accounts/acct_t/topups", map[string]any{
		"amount": 2500, "success_url": "https://example.com/ok", "cancel_url": "https://example.com/cancel",
	}).want(t, http.StatusCreated, "")
	topup := got.JSON["topup"].(map[string]any)
	id := topup["id"].(string)
	if topup["status"] != "pending" || topup["checkout_url"] != "https://checkout.stripe.com/c/pay/cs_test_1" ||
		topup["session_id"] != "cs_test_1" || topup["amount"] != float64(2500) || topup["currency"] != "eur" {
		t.Fatalf("top-up: %s", got.Body)
	}

	requests := stripe.Sessions()
	if len(requests) != 1 {
		t.Fatalf("%d Checkout Session requests, want 1", len(requests))
	}
	form := requests[0]
	for field, want := range map[string]string{
		"mode":                                   "payment",
		"metadata[account_id]":                   "acct_t",
		"metadata[topup_id]":                     id,
		"client_reference_id":                    "acct_t",
		"line_items[0][quantity]":                "1",
		"line_items[0][price_data][currency]":    "eur",
		"line_items[0][price_data][unit_amount]": "2500",
		"success_url":                            "https://example.com/ok",
		"cancel_url":                             "https://example.com/cancel",
	} {
		if form.Get(field) != want {
			t.Errorf("Checkout Session %s = %q, want %q", field, form.Get(field), want)
		}
	}
	if seen := <-rowSeen; seen != "pending" {
		t.Fatalf("when Stripe was called the top-up row was %q, want pending (written first)", seen)
	}

	row, err := db.GetTopup(t.Context(), s.pool, id)
	if err != nil {
		t.Fatal(err)
	}
	if row.Status != "pending" || row.SessionID != "cs_test_1" || row.Amount != 2500 {
		t.Fatalf("stored top-up %+v", row)
	}
	if b := s.balance("acct_t"); b != 0 {
		t.Fatalf("balance %d before any payment, want 0", b)
	}

	again := s.call(http.MethodGet, "/v1/topups/"+id, nil).want(t, http.StatusOK, "")
	if again.JSON["topup"].(map[string]any)["status"] != "pending" {
		t.Fatalf("GET top-up: %s", again.Body)
	}
	s.call(http.MethodGet, "/v1/topups/top_nothing", nil).want(t, http.StatusNotFound, "topup_not_found")
	s.call(http.MethodGet, "/v1/topups/top%20x", nil).want(t, http.StatusBadRequest, "invalid_topup_id")
}

func TestTopupRefusesBadInput(t *testing.T) {
	t.Parallel()
	var s *server
	stripe, _ := newStripeStandIn(t, func() *server { return s })
	s = newServer(t, withStripe(stripe.URL))
	s.createAccount("acct_tb", "usd", 0)
	ok := "https://example.com/ok"
	cases := []struct {
		name, account string
		body          any
		status        int
		code          string
	}{
		{"zero amount", "acct_tb", map[string]any{"amount": 0, "success_url": ok}, 400, "invalid_amount"},
		{"negative amount", "acct_tb", map[string]any{"amount": -5, "success_url": ok}, 400, "invalid_amount"},
		{"fractional amount", "acct_tb", `{"amount":10.5,"success_url":"https://example.com/ok"}`, 400, "invalid_amount"},
		{"huge amount", "acct_tb", map[string]any{"amount": int64(1) << 62, "success_url": ok}, 400, "invalid_amount"},
		{"missing amount", "acct_tb", map[string]any{"success_url": ok}, 400, "invalid_amount"},
		{"missing success_url", "acct_tb", map[string]any{"amount": 500}, 400, "invalid_success_url"},
		{"relative success_url", "acct_tb", map[string]any{"amount": 500, "success_url": "/ok"}, 400, "invalid_success_url"},
		{"ftp cancel_url", "acct_tb", map[string]any{"amount": 500, "success_url": ok, "cancel_url": "ftp://x/y"}, 400, "invalid_cancel_url"},
		{"unknown field", "acct_tb", map[string]any{"amount": 500, "success_url": ok, "colour": "red"}, 400, "unknown_field"},
		{"another currency than the account's", "acct_tb", map[string]any{"amount": 500, "success_url": ok, "currency": "eur"}, 400, "invalid_currency"},
		{"empty body", "acct_tb", "", 400, "empty_body"},
		{"invalid account id", "a*b", map[string]any{"amount": 500, "success_url": ok}, 400, "invalid_account_id"},
		{"unknown account", "nobody", map[string]any{"amount": 500, "success_url": ok}, 404, "account_not_found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s.in(t).call(http.MethodPost, "/v1/accounts/"+c.account+"/topups", c.body).want(t, c.status, c.code)
		})
	}
	if n := s.count(`SELECT count(*) FROM topups`); n != 0 || stripe.Calls() != 0 {
		t.Fatalf("bad input wrote %d top-ups and called Stripe %d times", n, stripe.Calls())
	}
}

func TestTopupWhenStripeIsMissingOrFailing(t *testing.T) {
	t.Parallel()
	body := map[string]any{"amount": 500, "success_url": "https://example.com/ok"}

	unconfigured := newServer(t)
	unconfigured.createAccount("acct_s", "usd", 0)
	unconfigured.call(http.MethodPost, "/v1/accounts/acct_s/topups", body).want(t, http.StatusServiceUnavailable, "stripe_not_configured")
	if n := unconfigured.count(`SELECT count(*) FROM topups`); n != 0 {
		t.Fatalf("without a Stripe key %d top-ups were written", n)
	}

	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	unreachable := newServer(t, withStripe(gone.URL))
	unreachable.createAccount("acct_s", "usd", 0)
	unreachable.call(http.MethodPost, "/v1/accounts/acct_s/topups", body).want(t, http.StatusServiceUnavailable, "stripe_unavailable")

	var s *server
	refusing, _ := newStripeStandIn(t, func() *server { return s })
	refusing.FailWith(http.StatusBadRequest)
	s = newServer(t, withStripe(refusing.URL))
	s.createAccount("acct_s", "usd", 0)
	s.call(http.MethodPost, "/v1/accounts/acct_s/topups", map[string]any{"amount": 1, "success_url": "https://example.com/ok"}).
		want(t, http.StatusUnprocessableEntity, "stripe_rejected")
	// The order written before the call stays pending without a session: nothing can ever pay it.
	if n := s.count(`SELECT count(*) FROM topups WHERE status = 'pending' AND session_id IS NULL`); n != 1 {
		t.Fatalf("%d unsent pending orders, want 1", n)
	}
}

// signedEvent returns a Stripe event of eventType around object, and its Stripe-Signature header.
func signedEvent(t *testing.T, secret, id, eventType string, object map[string]any) (string, string) {
	t.Helper()
	body := stripefake.Event(id, eventType, "2024-06-20", object)
	return string(body), stripefake.Sign(body, secret, time.Now())
}

// The whole path of a top-up: the API creates the pending order and its Checkout Session; Stripe's
// checkout.session.completed for that session marks it paid and credits once; a second completion
// event (another event id, same session) credits nothing.
func TestTopupPaidByWebhookCreditsOnce(t *testing.T) {
	t.Parallel()
	const secret = "whsec_test_topups"
	var s *server
	stripe, _ := newStripeStandIn(t, func() *server { return s })
	s = newServer(t, withStripe(stripe.URL), func(c *config.Config) { c.WebhookSecrets = []string{secret} })
	s.createAccount("acct_pay", "eur", 0)

	created := s.call(http.MethodPost, "/v1/accounts/acct_pay/topups", map[string]any{
		"amount": 1500, "success_url": "https://example.com/ok", "cancel_url": "https://example.com/cancel",
	}).want(t, http.StatusCreated, "")
	topup := created.JSON["topup"].(map[string]any)
	id, session := topup["id"].(string), topup["session_id"].(string)

	completed := func(eventID string) reply {
		body, signature := signedEvent(t, secret, eventID, "checkout.session.completed", map[string]any{
			"id": session, "object": "checkout.session", "payment_status": "paid", "status": "complete",
			"amount_total": 1500, "currency": "eur", "payment_intent": "pi_pay_1", "client_reference_id": "acct_pay",
			"metadata": map[string]any{"account_id": "acct_pay", "topup_id": id},
		})
		return s.call(http.MethodPost, "/webhooks/stripe", body, "Stripe-Signature", signature, "Authorization", "")
	}

	first := completed("evt_pay_1").want(t, http.StatusOK, "")
	if first.JSON["credited"] != true {
		t.Fatalf("first completion: %s", first.Body)
	}
	paid := s.call(http.MethodGet, "/v1/topups/"+id, nil).want(t, http.StatusOK, "")
	if got := paid.JSON["topup"].(map[string]any); got["status"] != "paid" || got["payment_intent"] != "pi_pay_1" {
		t.Fatalf("after payment: %s", paid.Body)
	}

	second := completed("evt_pay_2").want(t, http.StatusOK, "")
	if second.JSON["credited"] != false || second.JSON["duplicate"] != false {
		t.Fatalf("second completion event: %s", second.Body)
	}
	s.wantMoney("acct_pay", 1500, 1)
	if n := s.count(`SELECT count(*) FROM topups WHERE account_id = 'acct_pay'`); n != 1 {
		t.Fatalf("%d orders, want the API's one", n)
	}
}

// A session paid without an API-created order (a Payment Link, a Dashboard session) is stored under
// its session id, so GET /v1/topups/{id} takes every id Stripe can send: a live Checkout Session id of
// 66 characters, and ids up to the 255 characters the webhook accepts. Longer is a 400.
func TestTopupFoundByStripeLengthSessionID(t *testing.T) {
	t.Parallel()
	const secret = "whsec_test_topup_ids"
	s := newServer(t, func(c *config.Config) { c.WebhookSecrets = []string{secret} })
	s.createAccount("acct_ids", "usd", 0)
	live := "cs_live_a1" + strings.Repeat("Bc9", 18) + "xY"
	if len(live) != 66 {
		t.Fatalf("live session id of %d characters, want 66", len(live))
	}
	longest := "cs_live_" + strings.Repeat("z", 247)
	for i, session := range []string{live, longest} {
		body, signature := signedEvent(t, secret, fmt.Sprintf("evt_ids_%d", i), "checkout.session.completed", map[string]any{
			"id": session, "object": "checkout.session", "payment_status": "paid", "status": "complete",
			"amount_total": 100, "currency": "usd", "payment_intent": fmt.Sprintf("pi_ids_%d", i),
			"metadata": map[string]any{"account_id": "acct_ids"},
		})
		paid := s.call(http.MethodPost, "/webhooks/stripe", body, "Stripe-Signature", signature, "Authorization", "").want(t, http.StatusOK, "")
		if paid.JSON["credited"] != true {
			t.Fatalf("session of %d characters not credited: %s", len(session), paid.Body)
		}
		got := s.call(http.MethodGet, "/v1/topups/"+session, nil).want(t, http.StatusOK, "")
		if topup := got.JSON["topup"].(map[string]any); topup["id"] != session || topup["status"] != "paid" {
			t.Fatalf("GET the top-up of a %d-character session: %s", len(session), got.Body)
		}
	}
	s.call(http.MethodGet, "/v1/topups/"+longest+"z", nil).want(t, http.StatusBadRequest, "invalid_topup_id")
	s.wantMoney("acct_ids", 200, 2)
}
