package api

import (
	"net/http"
	"testing"

	"github.com/onceledger/onceledger/internal/stripemock"
)

// The Checkout Session (with and without saving the card) and the customer, exactly as POST topups
// builds them, are requests Stripe's API accepts: stripe-mock answers 400 to a parameter it would
// refuse, which the handler turns into 422 stripe_rejected.
func TestCheckoutSessionAcceptedByStripeMock(t *testing.T) {
	t.Parallel()
	s := newServer(t, withStripe(stripemock.Start(t)))
	if r := s.call(http.MethodPut, "/v1/accounts/acct_mock", map[string]any{"currency": "usd"}); r.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	for _, save := range []bool{false, true} {
		body := map[string]any{
			"amount": 2000, "success_url": "https://example.com/ok", "cancel_url": "https://example.com/no",
			"save_payment_method": save,
		}
		if r := s.call(http.MethodPost, "/v1/accounts/acct_mock/topups", body); r.Status != http.StatusCreated {
			t.Fatalf("save_payment_method=%v: stripe-mock refused the session: %d %s", save, r.Status, r.Body)
		}
	}
}
