package recharge_test

import (
	"context"
	"testing"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/recharge"
	"github.com/onceledger/onceledger/internal/stripeevents"
	"github.com/onceledger/onceledger/internal/stripemock"
)

// The off-session PaymentIntent, exactly as the job builds it, is a request Stripe's API accepts:
// stripe-mock refuses unknown or malformed parameters with a 400, which Charge returns as an error.
func TestPaymentIntentAcceptedByStripeMock(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	a := lowAccount(t, pool, "acct_mock")
	charger := recharge.NewCharger(pool, stripeevents.NewStripeClient("sk_test_123", stripemock.Start(t), nil), quiet)
	if err := charger.Charge(context.Background(), a.AccountID, a.ID); err != nil {
		t.Fatalf("stripe-mock refused the PaymentIntent: %v", err)
	}
	ch, err := db.AttemptCharge(context.Background(), pool, a.AccountID, a.ID)
	if err != nil || ch.PaymentIntent == "" {
		t.Fatalf("no PaymentIntent recorded: %+v, %v", ch, err)
	}
}
