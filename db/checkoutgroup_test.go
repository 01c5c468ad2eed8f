package db_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

type checkoutAnswer struct {
	paid   db.CheckoutPaid
	posted db.Posted
	err    error
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// lockWaiters counts the backends of this database waiting for a lock whose statement contains text.
func lockWaiters(t *testing.T, pool *pgxpool.Pool, text string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
		AND wait_event_type = 'Lock' AND strpos(query, $1) > 0`, text).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// lockAccount holds account's row in a transaction of its own until the returned func is called: as
// the balance update locks it, so that orders can still refer to the account.
func lockAccount(t *testing.T, pool *pgxpool.Pool, account string) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM accounts WHERE id = $1 FOR NO KEY UPDATE`, account); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = tx.Rollback(ctx) }) }
	t.Cleanup(release)
	return release
}

// startOneGroup has g take payments as one group: a first delivery's group is held at the grouper's
// gate until every payment waits, in order, then let go. wait returns each payment's answer, in order.
// g must be new.
func startOneGroup(t *testing.T, pool *pgxpool.Pool, g *db.Ledger, payments []db.CheckoutPayment) (wait func() []checkoutAnswer) {
	t.Helper()
	return startOneGroupIn(t, pool, g, payments, nil)
}

// startOneGroupIn is startOneGroup with payment i made in ctxs[i] (the background when ctxs is nil).
func startOneGroupIn(t *testing.T, pool *pgxpool.Pool, g *db.Ledger, payments []db.CheckoutPayment, ctxs []context.Context) (wait func() []checkoutAnswer) {
	t.Helper()
	ctx := context.Background()
	held, release := db.GateCheckoutGroups(g)
	t.Cleanup(release)
	holder := fmt.Sprintf("acct_holder_%d", time.Now().UnixNano())
	newAccount(t, pool, holder)
	first := make(chan checkoutAnswer, 1)
	go func() {
		id := "evt_" + holder
		paid, posted, err := g.PayCheckout(ctx, checkoutPayment(id, "cs_"+holder, "pi_"+holder, holder, 1))
		first <- checkoutAnswer{paid, posted, err}
	}()
	waitFor(t, "the first delivery's group is held", held)

	answers := make([]checkoutAnswer, len(payments))
	var wg sync.WaitGroup
	for i, p := range payments {
		ctx := ctx
		if ctxs != nil {
			ctx = ctxs[i]
		}
		wg.Go(func() {
			paid, posted, err := g.PayCheckout(ctx, p)
			answers[i] = checkoutAnswer{paid, posted, err}
		})
		// One at a time: the group is in the payments' order.
		waitFor(t, "the payment waits for the group", func() bool { return db.CheckoutsWaiting(g) == i+1 })
	}
	release()
	return func() []checkoutAnswer {
		t.Helper()
		wg.Wait()
		if a := <-first; a.err != nil || a.paid != db.CheckoutCredited {
			t.Fatalf("the first delivery: %v %v", a.paid, a.err)
		}
		return answers
	}
}

func payInOneGroup(t *testing.T, pool *pgxpool.Pool, g *db.Ledger, payments []db.CheckoutPayment) []checkoutAnswer {
	t.Helper()
	return startOneGroup(t, pool, g, payments)()
}

// transactionsOf counts the distinct transactions that inserted the entries under keys.
func transactionsOf(t *testing.T, pool *pgxpool.Pool, keys []string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(DISTINCT xmin::text) FROM ledger WHERE dedupe_key = ANY($1)`,
		keys).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func noViolations(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	violations, err := db.Verify(context.Background(), pool, time.Now(), time.Hour, time.Hour)
	if err != nil || len(violations) > 0 {
		t.Fatalf("verify: %v %+v", err, violations)
	}
}

// A group holds deliveries the happy path would credit and deliveries it would not, each of a kind
// PayCheckout refuses. Every member gets PayCheckout's own answer; the creditable ones commit together,
// in one transaction, with each account's entries chained (seq and balance_after per entry); the
// others write nothing. A member that did not go as planned never fails the others.
func TestCheckoutGrouperAnswersEachDeliveryAsItsOwnTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	for _, id := range []string{"acct_a", "acct_b", "acct_c"} {
		newAccount(t, pool, id)
	}
	if paid, _, err := dbtest.Ledger(t, pool).PayCheckout(ctx, checkoutPayment("evt_old", "cs_old", "pi_old", "acct_c", 50)); err != nil || paid != db.CheckoutCredited {
		t.Fatalf("earlier payment: %v %v", paid, err)
	}
	if _, _, err := db.InsertPendingTopup(ctx, pool, db.Topup{ID: "top_900", AccountID: "acct_a", Amount: 900, Currency: "usd"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetTopupSession(ctx, pool, "top_900", "cs_900", "https://checkout.example/cs_900"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.InsertPendingTopup(ctx, pool, db.Topup{ID: "top_pending", AccountID: "acct_b", Amount: 250, Currency: "usd"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetTopupSession(ctx, pool, "top_pending", "cs_pending", "https://checkout.example/cs_pending"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RecordEvent(ctx, pool, db.Event{
		ID: "evt_refund_early", Type: "charge.refunded", APIVersion: "2024-06-20", Created: time.Now(), Payload: []byte(`{}`),
		Outcome: "parked", ParkedReason: "unknown_payment", PaymentIntent: "pi_waited",
	}); err != nil {
		t.Fatal(err)
	}

	// Recorded by another transaction after the read, as the general path records an event it parks:
	// the group must not apply it again.
	if _, err := db.RecordEvent(ctx, pool, db.Event{
		ID: "evt_parked", Type: "checkout.session.completed", APIVersion: "2024-06-20", Created: time.Now(), Payload: []byte(`{}`),
		Outcome: "parked", ParkedReason: "amount_mismatch", PaymentIntent: "pi_parked",
	}); err != nil {
		t.Fatal(err)
	}
	// A pending order of another account for the session, committed after the read named acct_a.
	if _, _, err := db.InsertPendingTopup(ctx, pool, db.Topup{ID: "top_elsewhere", AccountID: "acct_c", Amount: 500, Currency: "usd"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetTopupSession(ctx, pool, "top_elsewhere", "cs_elsewhere", "https://checkout.example/cs_elsewhere"); err != nil {
		t.Fatal(err)
	}

	pending := checkoutPayment("evt_pending", "cs_pending", "pi_pending", "acct_b", 250)
	pending.Order.ID = "ignored: the order exists"
	keyTaken := checkoutPayment("evt_key", "cs_key", "pi_key", "acct_c", 10)
	keyTaken.Credit.DedupeKey = "stripe:evt_old"
	euros := checkoutPayment("evt_eur", "cs_eur", "pi_eur", "acct_c", 10)
	euros.Order.Currency = "eur"
	cases := []struct {
		name string
		pay  db.CheckoutPayment
		want db.CheckoutPaid
	}{
		{"a new session", checkoutPayment("evt_a1", "cs_a1", "pi_a1", "acct_a", 100), db.CheckoutCredited},
		{"another session of the same account", checkoutPayment("evt_a2", "cs_a2", "pi_a2", "acct_a", 200), db.CheckoutCredited},
		{"a session of another account", checkoutPayment("evt_b1", "cs_b1", "pi_b1", "acct_b", 300), db.CheckoutCredited},
		{"a pending order", pending, db.CheckoutCredited},
		{"the same event in the same group", checkoutPayment("evt_a1", "cs_a1", "pi_a1", "acct_a", 100), db.CheckoutDuplicate},
		{"another event for a session in the group", checkoutPayment("evt_a1b", "cs_a1", "pi_a1", "acct_a", 100), db.CheckoutNotPaid},
		{"an event recorded before", checkoutPayment("evt_old", "cs_old", "pi_old", "acct_c", 50), db.CheckoutDuplicate},
		{"an order of another amount", checkoutPayment("evt_900", "cs_900", "pi_900", "acct_a", 901), db.CheckoutNotPaid},
		{"an event waiting for the payment", checkoutPayment("evt_waited", "cs_waited", "pi_waited", "acct_b", 500), db.CheckoutNotPaid},
		{"a credit key taken", keyTaken, db.CheckoutNotPaid},
		{"an unknown account", checkoutPayment("evt_missing", "cs_missing", "pi_missing", "acct_missing", 500), db.CheckoutNotPaid},
		{"another currency than the account's", euros, db.CheckoutNotPaid},
		{"an event recorded meanwhile", checkoutPayment("evt_parked", "cs_parked", "pi_parked", "acct_b", 100), db.CheckoutDuplicate},
		{"an order of another account", checkoutPayment("evt_elsewhere", "cs_elsewhere", "pi_elsewhere", "acct_a", 500), db.CheckoutNotPaid},
		{"a third session of the same account", checkoutPayment("evt_a3", "cs_a3", "pi_a3", "acct_a", 400), db.CheckoutCredited},
	}
	payments := make([]db.CheckoutPayment, len(cases))
	for i, c := range cases {
		payments[i] = c.pay
	}
	var before [3]int
	before[0], before[1], before[2] = written(t, pool)
	g := dbtest.Ledger(t, pool, db.LedgerConfig{GroupCheckouts: true})
	answers := payInOneGroup(t, pool, g, payments)

	var creditedKeys []string
	for i, c := range cases {
		a := answers[i]
		if a.err != nil || a.paid != c.want {
			t.Errorf("%s: %v %v, want %v", c.name, a.paid, a.err, c.want)
			continue
		}
		if a.paid == db.CheckoutCredited {
			creditedKeys = append(creditedKeys, c.pay.Credit.DedupeKey)
			if e := a.posted.Entry; !a.posted.New || e.AccountID != c.pay.Order.AccountID || e.Amount != c.pay.Order.Amount ||
				e.DedupeKey != c.pay.Credit.DedupeKey || e.ID == 0 || a.posted.Entry.BalanceAfter != e.BalanceAfter {
				t.Errorf("%s: posted %+v", c.name, a.posted)
			}
		}
	}
	// The group wrote the credited deliveries and the first one (an order each but for the pending
	// one, which existed); the others wrote nothing.
	if events, orders, entries := written(t, pool); events != before[0]+len(creditedKeys)+1 || orders != before[1]+len(creditedKeys) ||
		entries != before[2]+len(creditedKeys)+1 {
		t.Errorf("events %d, orders %d, entries %d; before %v, %d credited", events, orders, entries, before, len(creditedKeys))
	}
	// Each account's entries follow each other in the order of the group, each with its own balance.
	for i, want := range map[int][2]int64{0: {1, 100}, 1: {2, 300}, 14: {3, 700}, 2: {1, 300}, 3: {2, 550}} {
		if e := answers[i].posted.Entry; e.Seq != want[0] || e.BalanceAfter != want[1] {
			t.Errorf("%s: seq %d balance %d, want %v", cases[i].name, e.Seq, e.BalanceAfter, want)
		}
	}
	if n := transactionsOf(t, pool, creditedKeys); n != 1 {
		t.Errorf("the credited deliveries committed in %d transactions, want one group", n)
	}
	for id, want := range map[string]int64{"acct_a": 700, "acct_b": 550, "acct_c": 50} {
		if acct, err := db.GetAccount(ctx, pool, id); err != nil || acct.Balance != want {
			t.Errorf("%s: %+v %v, want balance %d", id, acct, err, want)
		}
	}
	if order, err := db.GetTopup(ctx, pool, "top_pending"); err != nil || order.Status != db.TopupPaid || order.PaidEventID != "evt_pending" {
		t.Errorf("pending order: %+v %v", order, err)
	}
	noViolations(t, pool)
}

// A statement of the group fails as a whole (a payment that already paid another order breaks
// topups_payment_intent_key): nobody gets that failure. Every member runs its own transaction and gets
// its own answer, the others credited as if the failing one had never been there.
func TestCheckoutGrouperStatementFailureFailsNoOtherMember(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	newAccount(t, pool, "acct_1")
	if paid, _, err := dbtest.Ledger(t, pool).PayCheckout(ctx, checkoutPayment("evt_first", "cs_first", "pi_taken", "acct_1", 5)); err != nil || paid != db.CheckoutCredited {
		t.Fatalf("earlier payment: %v %v", paid, err)
	}
	payments := []db.CheckoutPayment{
		checkoutPayment("evt_1", "cs_1", "pi_1", "acct_1", 10),
		checkoutPayment("evt_taken", "cs_taken", "pi_taken", "acct_1", 10),
		checkoutPayment("evt_2", "cs_2", "pi_2", "acct_1", 20),
	}
	g := dbtest.Ledger(t, pool, db.LedgerConfig{GroupCheckouts: true})
	answers := payInOneGroup(t, pool, g, payments)
	for i, want := range []db.CheckoutPaid{db.CheckoutCredited, db.CheckoutNotPaid, db.CheckoutCredited} {
		if a := answers[i]; a.err != nil || a.paid != want {
			t.Errorf("member %d: %v %v, want %v", i, a.paid, a.err, want)
		}
	}
	if acct, err := db.GetAccount(ctx, pool, "acct_1"); err != nil || acct.Balance != 35 {
		t.Errorf("acct_1: %+v %v, want balance 35", acct, err)
	}
	noViolations(t, pool)
}

// The group's connection is cut while its credit statement waits for an account: the transaction is
// lost, never half-committed, and every member still commits, once, in its own transaction.
func TestCheckoutGrouperConnectionLostMidGroupLosesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	newAccount(t, pool, "acct_cut")
	newAccount(t, pool, "acct_other")
	release := lockAccount(t, pool, "acct_cut")
	payments := make([]db.CheckoutPayment, 8)
	for i := range payments {
		account := []string{"acct_cut", "acct_other"}[i%2]
		payments[i] = checkoutPayment(fmt.Sprintf("evt_%d", i), fmt.Sprintf("cs_%d", i), fmt.Sprintf("pi_%d", i), account, 10)
	}
	g := dbtest.Ledger(t, pool, db.LedgerConfig{GroupCheckouts: true})
	db.SetCheckoutLockTimeout(g, time.Minute) // long enough to catch the group waiting
	wait := startOneGroup(t, pool, g, payments)
	waitFor(t, "the group waits for the account", func() bool { return lockWaiters(t, pool, "LedgerAppend") == 1 })
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database()
		AND wait_event_type = 'Lock' AND strpos(query, 'LedgerAppend') > 0`); err != nil {
		t.Fatal(err)
	}
	release()
	answers := wait()
	for i, a := range answers {
		if a.err != nil || a.paid != db.CheckoutCredited {
			t.Errorf("delivery %d: %v %v", i, a.paid, a.err)
		}
	}
	if events, orders, entries := written(t, pool); events != 9 || orders != 9 || entries != 9 {
		t.Errorf("events %d, orders %d, entries %d; want 9 of each (with the first delivery)", events, orders, entries)
	}
	noViolations(t, pool)
}

// 64 deliveries at once, round after round: one session delivered 64 times (the same event 32 times,
// and 32 other events completing the same session), eight sessions delivered eight times each, and 64
// sessions once each. Each session is credited exactly once, whatever groups the deliveries fall into,
// and every other delivery is told it was a duplicate or left to the general path.
func TestCheckoutGrouperConcurrentRedeliveriesCreditOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	const accounts, deliveries = 4, 64
	for a := range accounts {
		newAccount(t, pool, fmt.Sprintf("acct_%d", a))
	}
	g := dbtest.Ledger(t, pool, db.LedgerConfig{GroupCheckouts: true})
	var sessionsInAll int64
	for r, sessions := range []int{1, 8, 64, 8, 1} {
		copies := deliveries / sessions
		var credited, duplicates, notPaid atomic.Int64
		start := make(chan struct{})
		var wg sync.WaitGroup
		for s := range sessions {
			for c := range copies {
				event := fmt.Sprintf("evt_%d_%d", r, s)
				if c%2 == 1 {
					event = fmt.Sprintf("evt_%d_%d_%d", r, s, c)
				}
				p := checkoutPayment(event, fmt.Sprintf("cs_%d_%d", r, s), fmt.Sprintf("pi_%d_%d", r, s), fmt.Sprintf("acct_%d", s%accounts), 1)
				wg.Go(func() {
					<-start
					paid, _, err := g.PayCheckout(ctx, p)
					switch {
					case err != nil:
						t.Errorf("%s: %v", p.Event.ID, err)
					case paid == db.CheckoutCredited:
						credited.Add(1)
					case paid == db.CheckoutDuplicate:
						duplicates.Add(1)
					default:
						notPaid.Add(1)
					}
				})
			}
		}
		close(start)
		wg.Wait()
		if credited.Load() != int64(sessions) || credited.Load()+duplicates.Load()+notPaid.Load() != deliveries {
			t.Fatalf("round %d: %d credited, %d duplicates, %d left to the general path; want %d credited of %d",
				r, credited.Load(), duplicates.Load(), notPaid.Load(), sessions, deliveries)
		}
		sessionsInAll += int64(sessions)
	}
	var entries, balance int64
	if err := pool.QueryRow(ctx, `SELECT count(*), sum(amount) FROM ledger WHERE kind = 'topup'`).Scan(&entries, &balance); err != nil {
		t.Fatal(err)
	}
	if entries != sessionsInAll || balance != sessionsInAll {
		t.Fatalf("%d entries summing %d, want %d", entries, balance, sessionsInAll)
	}
	noViolations(t, pool)
}

// A caller whose context ends while its delivery waits for a group gets its context's error, and
// nothing of its delivery is written.
func TestCheckoutGrouperCallerGoneBeforeItsGroupWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	newAccount(t, pool, "acct_hold")
	newAccount(t, pool, "acct_gone")
	g := dbtest.Ledger(t, pool, db.LedgerConfig{GroupCheckouts: true})
	held, release := db.GateCheckoutGroups(g)
	t.Cleanup(release)
	first := make(chan error, 1)
	go func() {
		_, _, err := g.PayCheckout(ctx, checkoutPayment("evt_hold", "cs_hold", "pi_hold", "acct_hold", 1))
		first <- err
	}()
	waitFor(t, "the first delivery's group is held", held)
	gone, cancel := context.WithCancel(ctx)
	answered := make(chan error, 1)
	go func() {
		_, _, err := g.PayCheckout(gone, checkoutPayment("evt_gone", "cs_gone", "pi_gone", "acct_gone", 1))
		answered <- err
	}()
	waitFor(t, "the delivery waits for a group", func() bool { return db.CheckoutsWaiting(g) == 1 })
	cancel()
	if err := <-answered; err == nil || !strings.Contains(err.Error(), context.Canceled.Error()) {
		t.Fatalf("gone caller: %v, want its context's error", err)
	}
	release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	var written bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM stripe_events WHERE event_id = 'evt_gone')`).Scan(&written); err != nil || written {
		t.Fatalf("the gone caller's event was written (%v)", err)
	}
}

// A member's account is held by another transaction for long (a billing chunk, say): the group waits
// for it only briefly, then every member takes its own transaction, so the deliveries of other accounts
// are credited while the account stays held, and the held one once it is let go.
func TestCheckoutGrouperBusyAccountHoldsUpNoOtherDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	newAccount(t, pool, "acct_busy")
	newAccount(t, pool, "acct_free")
	release := lockAccount(t, pool, "acct_busy")
	payments := []db.CheckoutPayment{
		checkoutPayment("evt_busy", "cs_busy", "pi_busy", "acct_busy", 10),
		checkoutPayment("evt_free_1", "cs_free_1", "pi_free_1", "acct_free", 10),
		checkoutPayment("evt_free_2", "cs_free_2", "pi_free_2", "acct_free", 20),
	}
	g := dbtest.Ledger(t, pool, db.LedgerConfig{GroupCheckouts: true})
	wait := startOneGroup(t, pool, g, payments)
	waitFor(t, "the other account's deliveries are credited", func() bool {
		acct, err := db.GetAccount(ctx, pool, "acct_free")
		return err == nil && acct.Balance == 30
	})
	// And the grouper is free for new deliveries meanwhile.
	newAccount(t, pool, "acct_later")
	if paid, _, err := g.PayCheckout(ctx, checkoutPayment("evt_later", "cs_later", "pi_later", "acct_later", 5)); err != nil || paid != db.CheckoutCredited {
		t.Fatalf("a later delivery: %v %v", paid, err)
	}
	release()
	for i, a := range wait() {
		if a.err != nil || a.paid != db.CheckoutCredited {
			t.Errorf("delivery %d: %v %v", i, a.paid, a.err)
		}
	}
	noViolations(t, pool)
}
