package api

import (
	"net/http"
	"testing"

	"github.com/onceledger/onceledger/internal/stripefake"
)

// PUT recharge needs a saved card; a top-up with save_payment_method makes one customer for the
// account and asks Checkout to save the card off-session; GET shows the settings.
func TestRechargeAndAlertSettings(t *testing.T) {
	t.Parallel()
	stripe := stripefake.New()
	t.Cleanup(stripe.Close)
	s := newServer(t, withStripe(stripe.URL))
	if r := s.call(http.MethodPut, "/v1/accounts/acct_set", map[string]any{"currency": "usd"}); r.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	settings := map[string]any{"threshold": 1000, "amount": 5000, "enabled": true}
	if r := s.call(http.MethodPut, "/v1/accounts/acct_set/recharge", settings); r.Status != http.StatusConflict || r.code() != "payment_method_required" {
		t.Fatalf("enable without a card: %d %s", r.Status, r.Body)
	}
	if r := s.call(http.MethodPut, "/v1/accounts/acct_nobody/recharge", settings); r.Status != http.StatusNotFound {
		t.Fatalf("unknown account: %d %s", r.Status, r.Body)
	}
	if r := s.call(http.MethodPut, "/v1/accounts/acct_set/recharge", map[string]any{"threshold": -1, "amount": 5000, "enabled": false}); r.Status != http.StatusBadRequest || r.code() != "invalid_threshold" {
		t.Fatalf("negative threshold: %d %s", r.Status, r.Body)
	}
	if r := s.call(http.MethodPut, "/v1/accounts/acct_set/alerts", map[string]any{"low_balance": 300}); r.Status != http.StatusOK {
		t.Fatalf("alerts: %d %s", r.Status, r.Body)
	}

	for range 2 {
		topup := map[string]any{"amount": 2000, "success_url": "https://example.com/ok", "save_payment_method": true}
		if r := s.call(http.MethodPost, "/v1/accounts/acct_set/topups", topup); r.Status != http.StatusCreated {
			t.Fatalf("top-up saving the card: %d %s", r.Status, r.Body)
		}
	}
	if n := len(stripe.Customers()); n != 1 {
		t.Fatalf("%d Stripe customers created for one account, want 1", n)
	}
	for _, form := range stripe.Sessions() {
		if form.Get("customer") != "cus_test_1" || form.Get("payment_intent_data[setup_future_usage]") != "off_session" {
			t.Fatalf("session form %v: want customer cus_test_1 and setup_future_usage off_session", form)
		}
	}
	if _, err := s.pool.Exec(t.Context(), `UPDATE accounts SET payment_method = 'pm_saved' WHERE id = 'acct_set'`); err != nil {
		t.Fatal(err)
	}
	if r := s.call(http.MethodPut, "/v1/accounts/acct_set/recharge", settings); r.Status != http.StatusOK {
		t.Fatalf("enable with a card: %d %s", r.Status, r.Body)
	}
	r := s.call(http.MethodGet, "/v1/accounts/acct_set", nil)
	acct, _ := r.JSON["account"].(map[string]any)
	recharge, _ := acct["recharge"].(map[string]any)
	alerts, _ := acct["alerts"].(map[string]any)
	if recharge["enabled"] != true || recharge["threshold"] != float64(1000) || recharge["amount"] != float64(5000) ||
		recharge["payment_method_saved"] != true || alerts["low_balance"] != float64(300) {
		t.Fatalf("GET account: %s", r.Body)
	}
}
