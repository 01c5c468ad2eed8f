package db_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

// checkoutPayment is a paid session's completion as the webhook's happy path records it.
func checkoutPayment(eventID, session, paymentIntent, account string, amount int64) db.CheckoutPayment {
	return db.CheckoutPayment{
		Event: db.Event{
			ID: eventID, Type: "checkout.session.completed", APIVersion: "2024-06-20", Created: time.Now(),
			Payload: []byte(`{}`), Outcome: "applied", PaymentIntent: paymentIntent,
		},
		Order: db.Topup{
			ID: session, AccountID: account, SessionID: session, PaymentIntent: paymentIntent, Amount: amount, Currency: "usd",
		},
		Credit: db.Posting{Kind: db.KindTopup, Description: "Stripe Checkout " + session, DedupeKey: "stripe:" + eventID},
	}
}

// written counts what PayCheckout can write: events, orders and entries.
func written(t *testing.T, pool *pgxpool.Pool) (events, orders, entries int) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM stripe_events), (SELECT count(*) FROM topups),
		(SELECT count(*) FROM ledger WHERE kind = 'topup')`).Scan(&events, &orders, &entries)
	if err != nil {
		t.Fatal(err)
	}
	return events, orders, entries
}

func newAccount(t *testing.T, pool *pgxpool.Pool, id string) {
	t.Helper()
	if _, err := dbtest.Ledger(t, pool).CreateAccount(context.Background(), id, "usd", 0); err != nil {
		t.Fatal(err)
	}
}

// PayCheckout commits only what the general path would: the event, the order made paid by this event
// and its credit. In every other state it writes nothing and says so, whatever the read before it saw.
func TestPayCheckoutCommitsOnlyTheHappyPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	newAccount(t, pool, "acct_1")

	paid, posted, err := dbtest.Ledger(t, pool).PayCheckout(ctx, checkoutPayment("evt_1", "cs_1", "pi_1", "acct_1", 500))
	if err != nil || paid != db.CheckoutCredited || !posted.New || posted.Entry.BalanceAfter != 500 || posted.Entry.Seq != 1 {
		t.Fatalf("first delivery: %v %+v %v", paid, posted, err)
	}
	order, err := db.TopupBySession(ctx, pool, "cs_1")
	if err != nil || order.Status != db.TopupPaid || order.PaidEventID != "evt_1" || order.PaymentIntent != "pi_1" {
		t.Fatalf("order: %+v %v", order, err)
	}

	// A pending order created through the API is paid by the same statement.
	if _, _, err := db.InsertPendingTopup(ctx, pool, db.Topup{ID: "top_api", AccountID: "acct_1", Amount: 700, Currency: "usd"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetTopupSession(ctx, pool, "top_api", "cs_api", "https://checkout.example/cs_api"); err != nil {
		t.Fatal(err)
	}
	api := checkoutPayment("evt_api", "cs_api", "pi_api", "acct_1", 700)
	api.Order.ID = "ignored: the order exists"
	if paid, posted, err := dbtest.Ledger(t, pool).PayCheckout(ctx, api); err != nil || paid != db.CheckoutCredited || posted.Entry.BalanceAfter != 1200 {
		t.Fatalf("pending order: %v %+v %v", paid, posted, err)
	}
	if order, err := db.GetTopup(ctx, pool, "top_api"); err != nil || order.Status != db.TopupPaid || order.PaidEventID != "evt_api" {
		t.Fatalf("API order: %+v %v", order, err)
	}

	if _, err := db.RecordEvent(ctx, pool, db.Event{
		ID: "evt_refund_early", Type: "charge.refunded", APIVersion: "2024-06-20", Created: time.Now(), Payload: []byte(`{}`),
		Outcome: "parked", ParkedReason: "unknown_payment", PaymentIntent: "pi_waited",
	}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.InsertPendingTopup(ctx, pool, db.Topup{ID: "top_other", AccountID: "acct_1", Amount: 900, Currency: "usd"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetTopupSession(ctx, pool, "top_other", "cs_other", "https://checkout.example/cs_other"); err != nil {
		t.Fatal(err)
	}

	// A pending order of another account for the session, committed after the read named the
	// metadata's account: the order would be paid while the credit went elsewhere.
	newAccount(t, pool, "acct_other")
	if _, _, err := db.InsertPendingTopup(ctx, pool, db.Topup{ID: "top_elsewhere", AccountID: "acct_other", Amount: 500, Currency: "usd"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetTopupSession(ctx, pool, "top_elsewhere", "cs_elsewhere", "https://checkout.example/cs_elsewhere"); err != nil {
		t.Fatal(err)
	}

	events, orders, entries := written(t, pool)
	cases := []struct {
		name string
		pay  db.CheckoutPayment
		want db.CheckoutPaid
	}{
		{"the same event again", checkoutPayment("evt_1", "cs_1", "pi_1", "acct_1", 500), db.CheckoutDuplicate},
		{"another event for a paid session", checkoutPayment("evt_1b", "cs_1", "pi_1", "acct_1", 500), db.CheckoutNotPaid},
		{"a payment that paid another order", checkoutPayment("evt_2", "cs_2", "pi_1", "acct_1", 500), db.CheckoutNotPaid},
		{"an order of another amount", checkoutPayment("evt_3", "cs_other", "pi_3", "acct_1", 901), db.CheckoutNotPaid},
		{"an event waiting for the payment", checkoutPayment("evt_4", "cs_4", "pi_waited", "acct_1", 500), db.CheckoutNotPaid},
		{"a credit key taken", checkoutPayment("evt_5", "cs_5", "pi_5", "acct_1", 500), db.CheckoutNotPaid},
		{"an unknown account", checkoutPayment("evt_6", "cs_6", "pi_6", "acct_missing", 500), db.CheckoutNotPaid},
		{"another currency than the account's", checkoutPayment("evt_7", "cs_7", "pi_7", "acct_1", 500), db.CheckoutNotPaid},
		{"an order of another account", checkoutPayment("evt_8", "cs_elsewhere", "pi_8", "acct_1", 500), db.CheckoutNotPaid},
	}
	cases[5].pay.Credit.DedupeKey = "stripe:evt_1"
	cases[7].pay.Order.Currency = "eur"
	for _, c := range cases {
		paid, _, err := dbtest.Ledger(t, pool).PayCheckout(ctx, c.pay)
		if err != nil || paid != c.want {
			t.Errorf("%s: %v %v, want %v", c.name, paid, err, c.want)
		}
	}
	if e, o, n := written(t, pool); e != events || o != orders || n != entries {
		t.Fatalf("refused deliveries wrote: events %d→%d, orders %d→%d, entries %d→%d", events, e, orders, o, entries, n)
	}
	if violations, err := db.Verify(ctx, pool, timeNow(), parkedAfter, parkedAfter); err != nil || len(violations) > 0 {
		t.Fatalf("verify: %v %v", violations, err)
	}
}

// Completions of one session delivered at once under different event ids (a completion and its
// async_payment_succeeded, or a replayed capture) make the order paid once and credit it once: every
// other delivery writes nothing and is left to the general path.
func TestPayCheckoutConcurrentCompletionsCreditOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	newAccount(t, pool, "acct_race")
	const n = 32
	results := make([]db.CheckoutPaid, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], _, errs[i] = dbtest.Ledger(t, pool).PayCheckout(ctx, checkoutPayment(fmt.Sprintf("evt_race_%d", i), "cs_race", "pi_race", "acct_race", 300))
		}()
	}
	close(start)
	wg.Wait()
	credited := 0
	for i, paid := range results {
		if errs[i] != nil {
			t.Fatalf("delivery %d: %v", i, errs[i])
		}
		if paid == db.CheckoutCredited {
			credited++
		}
	}
	events, orders, entries := written(t, pool)
	acct, err := db.GetAccount(ctx, pool, "acct_race")
	if err != nil {
		t.Fatal(err)
	}
	if credited != 1 || events != 1 || orders != 1 || entries != 1 || acct.Balance != 300 {
		t.Fatalf("credited %d, events %d, orders %d, entries %d, balance %d; want one of each and 300",
			credited, events, orders, entries, acct.Balance)
	}
}

// A refund that parks, waiting for this payment, while the payment's lock is held (it looked for the
// order before the top-up recorded it) is seen by the top-up that waited for the lock: PayCheckout
// writes nothing and leaves the event to the general path, which re-applies the refund. Were the
// parked events read before the lock was granted, the refund would stay parked for good.
func TestPayCheckoutSeesARefundParkedWhileItWaitedForThePayment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	newAccount(t, pool, "acct_wait")

	refund, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer refund.Rollback(ctx)
	if err := db.LockPayment(ctx, refund, "pi_wait"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RecordEvent(ctx, refund, db.Event{
		ID: "evt_refund", Type: "refund.created", APIVersion: "2024-06-20", Created: time.Now(), Payload: []byte(`{}`),
		Outcome: "parked", ParkedReason: "unknown_payment", PaymentIntent: "pi_wait",
	}); err != nil {
		t.Fatal(err)
	}

	type answer struct {
		paid db.CheckoutPaid
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		paid, _, err := dbtest.Ledger(t, pool).PayCheckout(ctx, checkoutPayment("evt_topup", "cs_wait", "pi_wait", "acct_wait", 1000))
		answered <- answer{paid, err}
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var waiting bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND wait_event = 'advisory')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the top-up never waited for the payment's lock")
		}
	}
	if err := refund.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if a := <-answered; a.err != nil || a.paid != db.CheckoutNotPaid {
		t.Fatalf("PayCheckout = %v %v, want CheckoutNotPaid", a.paid, a.err)
	}
	if events, orders, entries := written(t, pool); events != 1 || orders != 0 || entries != 0 {
		t.Fatalf("events %d, orders %d, entries %d: want only the parked refund", events, orders, entries)
	}
}
