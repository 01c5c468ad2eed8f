package db_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

// rechargeable creates an account with balance, a saved card and recharge on below threshold.
func rechargeable(t *testing.T, pool *pgxpool.Pool, id string, balance, threshold, amount int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, id, "usd", balance); err != nil {
		t.Fatal(err)
	}
	if err := db.SetStripeCustomer(ctx, pool, id, "cus_"+id); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetPaymentMethod(ctx, pool, id, "cus_"+id, "pm_"+id); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetRecharge(ctx, pool, id, db.RechargeSettings{Enabled: true, Threshold: &threshold, Amount: &amount}); err != nil {
		t.Fatal(err)
	}
}

func TestRechargeNeedsASavedCard(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	createAccount(t, pool, "acct_nocard")
	threshold, amount := int64(100), int64(500)
	_, err := db.SetRecharge(context.Background(), pool, "acct_nocard", db.RechargeSettings{Enabled: true, Threshold: &threshold, Amount: &amount})
	if !errors.Is(err, db.ErrPaymentMethodRequired) {
		t.Fatalf("enable without a card: %v, want ErrPaymentMethodRequired", err)
	}
	// Saved settings without enabling are fine; a card of another customer is not recorded.
	if _, err := db.SetRecharge(context.Background(), pool, "acct_nocard", db.RechargeSettings{Enabled: false, Threshold: &threshold, Amount: &amount}); err != nil {
		t.Fatal(err)
	}
	if err := db.SetStripeCustomer(context.Background(), pool, "acct_nocard", "cus_a"); err != nil {
		t.Fatal(err)
	}
	if saved, err := db.SetPaymentMethod(context.Background(), pool, "acct_nocard", "cus_other", "pm_x"); err != nil || saved {
		t.Fatalf("card of another customer: saved=%v, %v", saved, err)
	}
	if _, err := db.SetRecharge(context.Background(), pool, "acct_nocard", db.RechargeSettings{Enabled: true, Threshold: &threshold, Amount: &amount}); !errors.Is(err, db.ErrPaymentMethodRequired) {
		t.Fatalf("enable with a customer but no card: %v", err)
	}
}

// A billing chunk that takes 1,000 accounts below their threshold makes exactly one attempt (and one
// pending order) each; a second chunk in the same episode makes none.
func TestRechargeBillingChunkCrossingForThousandAccounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	const n = 1000
	for i := range n {
		rechargeable(t, pool, fmt.Sprintf("acct_%04d", i), 1000, 100, 500)
	}
	bill := func(round int) {
		t.Helper()
		batch := make([]db.Decision, n)
		for i := range n {
			batch[i] = db.Decision{ID: fmt.Sprintf("d%d_%04d", round, i), AccountID: fmt.Sprintf("acct_%04d", i), Cost: 450, OccurredAt: time.Now()}
		}
		if _, err := db.StoreDecisions(ctx, pool, batch); err != nil {
			t.Fatal(err)
		}
		last, err := db.LastDecisionSeq(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		chunk, err := dbtest.Ledger(t, pool).BillChunk(ctx, last-n, last, n)
		if err != nil || len(chunk.Posted) != n {
			t.Fatalf("bill round %d: %d posted, %v", round, len(chunk.Posted), err)
		}
	}
	bill(1) // 1000 -> 550: above 100, no attempt
	if got := count(t, pool, `SELECT count(*) FROM recharge_attempts`); got != 0 {
		t.Fatalf("%d attempts above the threshold", got)
	}
	bill(2) // 550 -> 100: not below
	bill(3) // 100 -> -350: below
	if got := count(t, pool, `SELECT count(*) FROM recharge_attempts WHERE status = 'requested' AND episode = 1`); got != n {
		t.Fatalf("%d attempts after the crossing chunk, want %d", got, n)
	}
	if got := count(t, pool, `SELECT count(*) FROM topups t JOIN recharge_attempts r ON (r.account_id, r.topup_id) = (t.account_id, t.id) WHERE t.status = 'pending' AND t.amount = 500`); got != n {
		t.Fatalf("%d pending orders, want %d", got, n)
	}
	bill(4) // still below, the same episode
	if got := count(t, pool, `SELECT count(*) FROM recharge_attempts`); got != n {
		t.Fatalf("%d attempts after a second chunk in the episode, want %d", got, n)
	}
}

// Debits racing below the threshold on one account make one attempt.
func TestRechargeConcurrentDebitsMakeOneAttempt(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	rechargeable(t, pool, "acct_race", 1000, 500, 1000)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := post(t, pool, db.Posting{AccountID: "acct_race", Kind: db.KindUsage, Amount: -30, DedupeKey: fmt.Sprintf("race:%d", i)})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := count(t, pool, `SELECT count(*) FROM recharge_attempts WHERE account_id = 'acct_race'`); got != 1 {
		t.Fatalf("%d attempts, want 1", got)
	}

	// The same through group commit, the path of hot accounts.
	rechargeable(t, pool, "acct_group", 1000, 500, 1000)
	poster := dbtest.Ledger(t, pool, db.LedgerConfig{Groups: db.GroupOptions{}})
	var group sync.WaitGroup
	groupErrs := make(chan error, 32)
	for i := range 32 {
		group.Add(1)
		go func() {
			defer group.Done()
			_, err := poster.PostGrouped(context.Background(), db.Posting{AccountID: "acct_group", Kind: db.KindUsage, Amount: -30, DedupeKey: fmt.Sprintf("group:%d", i)})
			groupErrs <- err
		}()
	}
	group.Wait()
	close(groupErrs)
	for err := range groupErrs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := count(t, pool, `SELECT count(*) FROM recharge_attempts WHERE account_id = 'acct_group'`); got != 1 {
		t.Fatalf("%d attempts through group commit, want 1", got)
	}
}

// A capture releases held and posts its usage in two statements: judged at commit by its net effect,
// it starts no attempt when available does not end below the threshold, and no new episode when it
// does not end above it.
func TestRechargeHoldCaptureJudgedByItsNetEffect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	rechargeable(t, pool, "acct_hold", 1000, 100, 500)
	if _, err := db.AuthoriseHold(ctx, pool, "acct_hold", db.HoldRequest{ID: "h1", Amount: 950, ExpiresIn: time.Hour}); err != nil {
		t.Fatal(err)
	}
	// Available 50: the authorisation is a debit of available.
	if got := count(t, pool, `SELECT count(*) FROM recharge_attempts WHERE episode = 1`); got != 1 {
		t.Fatalf("%d attempts after the hold, want 1", got)
	}
	// Capturing it all leaves available at 50: released (1000) and spent (50) in one transaction.
	if _, err := dbtest.Ledger(t, pool).CaptureHold(ctx, "acct_hold", "h1", 950); err != nil {
		t.Fatal(err)
	}
	if got := count(t, pool, `SELECT count(*) FROM recharge_attempts`); got != 1 {
		t.Fatalf("%d attempts after a capture that changed nothing available, want 1", got)
	}
	if got := count(t, pool, `SELECT recharge_episode FROM accounts WHERE id = 'acct_hold'`); got != 1 {
		t.Fatalf("episode %d after the capture, want 1", got)
	}
}

// Available back at the threshold starts a new episode: the next dip makes the next attempt.
func TestRechargeNewEpisodeAfterRecovery(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	rechargeable(t, pool, "acct_ep", 1000, 100, 500)
	debit := func(key string, amount int64) {
		t.Helper()
		if _, err := post(t, pool, db.Posting{AccountID: "acct_ep", Kind: db.KindAdjustment, Amount: amount, DedupeKey: key}); err != nil {
			t.Fatal(err)
		}
	}
	debit("a", -950) // 50
	debit("b", 30)   // 80: still the same episode
	debit("c", -10)  // 70
	debit("d", 30)   // 100: recovered
	debit("e", -1)   // 99: a new episode
	if got := count(t, pool, `SELECT count(*) FROM recharge_attempts`); got != 2 {
		t.Fatalf("%d attempts, want 2 (one per episode)", got)
	}
}

// A flapping balance sends one balance.low per crossing below and one balance.recovered per crossing
// back, whatever happens in between.
func TestAlertsOnePerCrossing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_flap", "usd", 1000); err != nil {
		t.Fatal(err)
	}
	threshold := int64(500)
	if _, err := db.SetLowBalanceAlert(ctx, pool, "acct_flap", &threshold); err != nil {
		t.Fatal(err)
	}
	i := 0
	move := func(amount int64) {
		t.Helper()
		i++
		if _, err := post(t, pool, db.Posting{AccountID: "acct_flap", Kind: db.KindAdjustment, Amount: amount, DedupeKey: fmt.Sprintf("flap:%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		move(-600) // 400: low
		move(-10)  // still low
		move(10)   // still low
		move(600)  // 1000: recovered
		move(1)    // still fine
		move(-1)   // still fine, back to 1000
	}
	alerts, err := db.BalanceAlerts(ctx, pool, "acct_flap")
	if err != nil {
		t.Fatal(err)
	}
	if len(alerts) != 5 {
		t.Fatalf("%d alert episodes, want 5", len(alerts))
	}
	for _, a := range alerts {
		if a.LowAvailable != 400 || a.RecoveredAvailable == nil || *a.RecoveredAvailable != 1000 {
			t.Fatalf("alert %+v: want low at 400, recovered at 1000", a)
		}
	}
}
