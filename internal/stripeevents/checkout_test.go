package stripeevents_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/stripeevents"
)

// roundTrips counts what a pool's connections send and wait for: each query, batch and prepare.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}
func (r *roundTrips) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// A paid Checkout Session's first delivery costs three round trips to the database (a read, then BEGIN
// with every statement in one batch, then COMMIT) and a redelivery one (the read), once the
// connection has its statements prepared. The general path took thirteen.
func TestCheckoutDeliveryRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	trips := &roundTrips{}
	cfg.ConnConfig.Tracer = trips
	cfg.MaxConns = 1
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_trips", "usd", 0); err != nil {
		t.Fatal(err)
	}
	p := &stripeevents.Processor{Pool: pool, Ledger: dbtest.Ledger(t, pool), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	paid := func(n string) []byte {
		return event("evt_trips_"+n, "checkout.session.completed", map[string]any{
			"id": "cs_trips_" + n, "object": "checkout.session", "payment_status": "paid", "amount_total": 100,
			"currency": "usd", "payment_intent": "pi_trips_" + n, "metadata": map[string]any{"account_id": "acct_trips"},
		})
	}
	deliver := func(body []byte) (stripeevents.Result, int64) {
		t.Helper()
		trips.n.Store(0)
		res, err := p.Process(ctx, body)
		if err != nil {
			t.Fatal(err)
		}
		return res, trips.n.Load()
	}
	// The first ones prepare the statements on the connection.
	deliver(paid("warm"))
	deliver(paid("warm"))

	if res, n := deliver(paid("1")); !res.Credited || n != 3 {
		t.Errorf("first delivery: %+v in %d round trips, want credited in 3", res, n)
	}
	if res, n := deliver(paid("1")); !res.Duplicate || n != 1 {
		t.Errorf("redelivery: %+v in %d round trips, want a duplicate in 1", res, n)
	}
	if acct, err := db.GetAccount(ctx, pool, "acct_trips"); err != nil || acct.Balance != 200 {
		t.Fatalf("balance %d (%v), want 200", acct.Balance, err)
	}
}

// What the happy path leaves to the general path is applied as the general path applies it: a session
// in another currency than its account parks currency_mismatch, and a session that saves the card
// records the account's customer as it credits.
func TestCheckoutHappyPathLeavesTheRestToTheGeneralPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_usd", "usd", 0); err != nil {
		t.Fatal(err)
	}
	p := &stripeevents.Processor{Pool: pool, Ledger: dbtest.Ledger(t, pool), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	res, err := p.Process(ctx, event("evt_eur", "checkout.session.completed", map[string]any{
		"id": "cs_eur", "object": "checkout.session", "payment_status": "paid", "amount_total": 100,
		"currency": "eur", "payment_intent": "pi_eur", "metadata": map[string]any{"account_id": "acct_usd"},
	}))
	if err != nil || res.Credited || res.Parked != stripeevents.ReasonCurrencyMismatch {
		t.Fatalf("a session in euros for a dollar account: %+v %v, want parked %s", res, err, stripeevents.ReasonCurrencyMismatch)
	}
	res, err = p.Process(ctx, event("evt_card", "checkout.session.completed", map[string]any{
		"id": "cs_card", "object": "checkout.session", "payment_status": "paid", "amount_total": 100,
		"currency": "usd", "payment_intent": "pi_card", "customer": "cus_saved",
		"metadata": map[string]any{"account_id": "acct_usd"},
	}))
	if err != nil || !res.Credited {
		t.Fatalf("a session saving the card: %+v %v, want credited", res, err)
	}
	if a, err := db.GetAutomation(ctx, pool, "acct_usd"); err != nil || a.StripeCustomer != "cus_saved" {
		t.Fatalf("customer %q (%v), want cus_saved recorded with the credit", a.StripeCustomer, err)
	}
}
