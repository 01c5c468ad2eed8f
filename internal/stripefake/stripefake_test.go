package stripefake_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/client"

	"github.com/onceledger/onceledger/internal/stripeevents"
	"github.com/onceledger/onceledger/internal/stripefake"
)

// start returns a stand-in, stopped when the test ends, and the service's own Stripe client for it.
func start(t *testing.T) (*stripefake.Server, *client.API) {
	standIn := stripefake.New()
	t.Cleanup(standIn.Close)
	return standIn, stripeevents.NewStripeClient(stripefake.SecretKey, standIn.URL, nil)
}

// The stand-in answers the way stripe-go reads Stripe: a charge's refunds, all pages of them, and a
// failure as a *stripe.Error with its status.
func TestStandInListsRefundsForStripeGo(t *testing.T) {
	t.Parallel()
	standIn, sc := start(t)
	standIn.SetRefunds("ch_t",
		map[string]any{"id": "re_1", "object": "refund", "amount": 300, "status": "succeeded", "payment_intent": "pi_t"},
		map[string]any{"id": "re_2", "object": "refund", "amount": 200, "status": "failed", "payment_intent": "pi_t"})

	var got []string
	it := sc.Refunds.List(&stripe.RefundListParams{Charge: stripe.String("ch_t")})
	for it.Next() {
		r := it.Refund()
		got = append(got, r.ID+":"+string(r.Status)+":"+r.PaymentIntent.ID)
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "re_1:succeeded:pi_t" || got[1] != "re_2:failed:pi_t" {
		t.Fatalf("refunds %v", got)
	}
	it = sc.Refunds.List(&stripe.RefundListParams{Charge: stripe.String("ch_other")})
	if it.Next() || it.Err() != nil {
		t.Fatalf("another charge lists refunds (err %v)", it.Err())
	}

	standIn.FailWith(http.StatusServiceUnavailable)
	it = sc.Refunds.List(&stripe.RefundListParams{Charge: stripe.String("ch_t")})
	var stripeErr *stripe.Error
	if it.Next() || !errors.As(it.Err(), &stripeErr) || stripeErr.HTTPStatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a failing stand-in answered %v", it.Err())
	}
}

// A Checkout Session is created from the form stripe-go sends, and recorded.
func TestStandInCreatesCheckoutSessions(t *testing.T) {
	t.Parallel()
	standIn, sc := start(t)
	params := &stripe.CheckoutSessionParams{Mode: stripe.String("payment"), ClientReferenceID: stripe.String("acct_1")}
	params.AddMetadata("account_id", "acct_1")
	s, err := sc.CheckoutSessions.New(params)
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != "cs_test_1" || s.URL == "" || s.Metadata["account_id"] != "acct_1" {
		t.Fatalf("session %+v", s)
	}
	if forms := standIn.Sessions(); len(forms) != 1 || forms[0].Get("client_reference_id") != "acct_1" {
		t.Fatalf("recorded %v", forms)
	}
}
