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

// The failure ladder's requests are ones Stripe's API accepts: the retry after a soft decline, and the
// first attempt after a hard decline forgot the card and a PUT enabled recharge on a new one. Each is
// a new attempt with its own Idempotency-Key.
func TestLadderPaymentIntentsAcceptedByStripeMock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	const account = "acct_mock_ladder"
	guardedAccount(t, pool, account, 1000, db.RechargeSettings{Threshold: ptr[int64](500), Amount: ptr[int64](100)})
	charger := recharge.NewCharger(pool, stripeevents.NewStripeClient("sk_test_123", stripemock.Start(t), nil), quiet)
	charge := func(a db.Attempt) string {
		t.Helper()
		if err := charger.Charge(ctx, a.AccountID, a.ID); err != nil {
			t.Fatalf("stripe-mock refused the PaymentIntent of try %d: %v", a.Retry, err)
		}
		ch, err := db.AttemptCharge(ctx, pool, a.AccountID, a.ID)
		if err != nil || ch.PaymentIntent == "" {
			t.Fatalf("no PaymentIntent recorded for try %d: %+v, %v", a.Retry, ch, err)
		}
		return recharge.IdempotencyKey(a.ID)
	}

	post(t, pool, account, "spend", -600)
	first := attemptsOf(t, pool, account)[0]
	keys := []string{charge(first)}
	resolve(t, pool, first, db.AttemptFailed, "insufficient_funds")
	if _, err := db.OpenRetry(ctx, pool, account, first.Episode, first.Retry); err != nil {
		t.Fatal(err)
	}
	retry := attemptsOf(t, pool, account)[0]
	if retry.Retry != 1 {
		t.Fatalf("no retry after a soft decline: %+v", retry)
	}
	keys = append(keys, charge(retry))

	resolve(t, pool, retry, db.AttemptFailed, "lost_card")
	if _, err := db.SetPaymentMethod(ctx, pool, account, "cus_"+account, "pm_new"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetRecharge(ctx, pool, account, db.RechargeSettings{Enabled: true, Threshold: ptr[int64](500), Amount: ptr[int64](100)}); err != nil {
		t.Fatal(err)
	}
	post(t, pool, account, "spend-again", -1)
	next := attemptsOf(t, pool, account)[0]
	if next.Episode == retry.Episode || next.Retry != 0 {
		t.Fatalf("after re-enabling: %+v, want the first try of a new episode", next)
	}
	keys = append(keys, charge(next))
	distinct(t, keys, 3)
}
