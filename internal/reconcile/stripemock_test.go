package reconcile_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/reconcile"
	"github.com/onceledger/onceledger/internal/stripeevents"
	"github.com/onceledger/onceledger/internal/stripemock"
)

// The missed-events listing, exactly as recovery asks for it (every handled type, delivery_success,
// created range), is a request Stripe's API accepts: stripe-mock answers 400 to a parameter it would
// refuse (more than 20 types, say), which Recover returns.
func TestEventListAcceptedByStripeMock(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	sc := stripeevents.NewStripeClient("sk_test_123", stripemock.Start(t))
	events := &stripeevents.Processor{Pool: pool, Ledger: dbtest.Ledger(t, pool), Stripe: sc, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	rep, err := reconcile.New(reconcile.Deps{Pool: pool, Ledger: dbtest.Ledger(t, pool), Stripe: sc, Events: events}, reconcile.Options{}).Recover(context.Background())
	if err != nil {
		t.Fatalf("stripe-mock refused the events list: %v", err)
	}
	if rep.Skipped != "" || rep.Listed == 0 {
		t.Fatalf("recovery did not list: %+v", rep)
	}
}
