package recharge_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/notify"
	"github.com/onceledger/onceledger/internal/recharge"
	"github.com/onceledger/onceledger/internal/stripeevents"
	"github.com/onceledger/onceledger/internal/stripefake"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// lowAccount creates an account with a saved card and recharge on (below 100, buy 500) and a
// low-balance alert at 200, then spends it below the threshold: one attempt, committed.
func lowAccount(t *testing.T, pool *pgxpool.Pool, id string) db.Attempt {
	t.Helper()
	guardedAccount(t, pool, id, 1000, db.RechargeSettings{Threshold: ptr[int64](100), Amount: ptr[int64](500)})
	threshold := int64(200)
	if _, err := db.SetLowBalanceAlert(context.Background(), pool, id, &threshold); err != nil {
		t.Fatal(err)
	}
	post(t, pool, id, "spend", -950)
	attempts := attemptsOf(t, pool, id)
	if len(attempts) != 1 {
		t.Fatalf("attempts: %v", attempts)
	}
	return attempts[0]
}

// enqueueOnlySweeper sweeps into River's tables through a client that works nothing.
func enqueueOnlySweeper(t *testing.T, pool *pgxpool.Pool) *recharge.Sweeper {
	t.Helper()
	jobs, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	notifier := notify.NewNotifier(jobs, notify.Config{URL: "http://127.0.0.1:1/unused", Secret: "s"})
	return &recharge.Sweeper{Pool: pool, Jobs: jobs, Notifier: notifier}
}

// The job retried after its first run lost Stripe's answer (a crash, a timeout, a dropped connection
// after Stripe acted) sends the same Idempotency-Key and so creates no second PaymentIntent.
func TestChargeRetriedCreatesOnePaymentIntent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	fake, charger := fakeCharger(t, pool)
	a := lowAccount(t, pool, "acct_retry")
	fake.LoseAnswers(1)
	if err := charger.Charge(ctx, a.AccountID, a.ID); err == nil {
		t.Fatal("a lost answer was taken for success")
	}
	if err := charger.Charge(ctx, a.AccountID, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := charger.Charge(ctx, a.AccountID, a.ID); err != nil {
		t.Fatal(err)
	}
	key := recharge.IdempotencyKey(a.ID)
	if keys := fake.PaymentIntentKeys(); len(keys) != 3 || keys[0] != key || keys[1] != key || keys[2] != key {
		t.Fatalf("Idempotency-Keys sent: %v, want %s three times", keys, key)
	}
	intents := fake.PaymentIntents()
	if len(intents) != 1 {
		t.Fatalf("%d PaymentIntents created, want 1", len(intents))
	}
	form := intents[0]
	want := map[string]string{
		"amount": "500", "currency": "usd", "customer": "cus_acct_retry", "payment_method": "pm_acct_retry",
		"confirm": "true", "off_session": "true",
		"metadata[account_id]": "acct_retry", "metadata[topup_id]": a.TopupID,
	}
	for field, value := range want {
		if got := form.Get(field); got != value {
			t.Errorf("PaymentIntent %s = %q, want %q", field, got, value)
		}
	}
	ch, err := db.AttemptCharge(ctx, pool, a.AccountID, a.ID)
	if err != nil || ch.PaymentIntent != "pi_test_1" {
		t.Fatalf("attempt's payment %q, %v", ch.PaymentIntent, err)
	}
}

// The attempt committed with the debit is in the outbox until a sweep enqueues its job, once; the
// alert likewise becomes one notification. A sweep after a crash finds what the last one did not take.
func TestSweeperEnqueuesEachOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	a := lowAccount(t, pool, "acct_sweep")
	sweeper := enqueueOnlySweeper(t, pool)
	// Two sweepers at once take different rows (SKIP LOCKED): together, each row once.
	var wg sync.WaitGroup
	counts := make([]int, 2)
	for i := range counts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := sweeper.Sweep(ctx)
			if err != nil {
				t.Error(err)
			}
			counts[i] = n
		}()
	}
	wg.Wait()
	if counts[0]+counts[1] != 5 {
		t.Fatalf("sweeps enqueued %v, want 5 together (the attempt's job, recharge.requested, balance.low and "+
			"recharge.status_changed off → ready → pending_attempt)", counts)
	}
	if n, err := sweeper.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("a later sweep enqueued %d, %v", n, err)
	}
	var jobs int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'recharge_payment_intent' AND (args->>'attempt_id')::bigint = $1`, a.ID).Scan(&jobs)
	if err != nil || jobs != 1 {
		t.Fatalf("%d recharge jobs, %v", jobs, err)
	}
	err = pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'account_event_notification' AND args->>'type' = 'balance.low'`).Scan(&jobs)
	if err != nil || jobs != 1 {
		t.Fatalf("%d balance.low notifications, %v", jobs, err)
	}
}

// End to end through River: the sweeper and the charger running, a debit below the threshold ends
// in one PaymentIntent, and the outcome and alert reach the receiver signed.
func TestRechargeRunsThroughRiver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	fake := stripefake.New()
	t.Cleanup(fake.Close)
	var (
		mu   sync.Mutex
		seen = map[string]int{}
	)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
	}))
	t.Cleanup(receiver.Close)
	// One River client, as the binary builds it: the charger's and the notifications' workers.
	workers, queues := river.NewWorkers(), map[string]river.QueueConfig{}
	recharge.AddWorkers(workers, queues, recharge.NewCharger(pool, stripeevents.NewStripeClient(stripefake.SecretKey, fake.URL, nil), quiet))
	notifyCfg := notify.Config{URL: receiver.URL, Secret: "s", Log: quiet}
	if err := notify.AddWorkers(workers, queues, notifyCfg); err != nil {
		t.Fatal(err)
	}
	jobs, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger: quiet, Workers: workers, Queues: queues, FetchPollInterval: 50 * time.Millisecond, FetchCooldown: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := jobs.Start(ctx); err != nil {
		t.Fatal(err)
	}
	sweeper := &recharge.Sweeper{Pool: pool, Jobs: jobs, Notifier: notify.NewNotifier(jobs, notifyCfg), Interval: 50 * time.Millisecond, Log: quiet}
	sweeper.Start(ctx)
	t.Cleanup(func() {
		sweeper.Stop()
		_ = jobs.Stop(ctx)
	})
	a := lowAccount(t, pool, "acct_river")
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		low := seen["ntf_low_acct_river_200_1"]
		mu.Unlock()
		if len(fake.PaymentIntents()) == 1 && low == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s: %d PaymentIntents, balance.low delivered %d times", len(fake.PaymentIntents()), low)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if keys := fake.PaymentIntentKeys(); len(keys) != 1 || keys[0] != recharge.IdempotencyKey(a.ID) {
		t.Fatalf("Idempotency-Keys %v", keys)
	}
}

// Each resolution of an attempt becomes its notification once: recharge.failed for every failure,
// recharge.disabled for the third in a row, recharge.action_required for a paused attempt.
func TestSweeperNotifiesEachOutcomeOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	a := lowAccount(t, pool, "acct_outcomes")
	sweeper := enqueueOnlySweeper(t, pool)
	resolve := func(a db.Attempt, status string) {
		t.Helper()
		err := db.InTx(ctx, pool, func(tx db.Tx) error {
			_, _, err := db.ResolveAttempt(ctx, tx, a, status, "pi_x", "card_declined", "insufficient_funds")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Three episodes, three failures: credit back above the threshold, then spend below again.
	for i := range 3 {
		resolve(a, db.AttemptFailed)
		if i == 2 {
			break
		}
		for _, amount := range []int64{950, -950} {
			err := db.InTx(ctx, pool, func(tx db.Tx) error {
				_, err := new(db.Ledger).Post(ctx, tx, db.Posting{
					AccountID: a.AccountID, Kind: db.KindAdjustment, Amount: amount, DedupeKey: fmt.Sprintf("move:%d:%d", i, amount),
				})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		attempts, err := db.Attempts(ctx, pool, a.AccountID, 1)
		if err != nil {
			t.Fatal(err)
		}
		a = attempts[0]
	}
	for range 2 {
		if _, err := sweeper.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	count := func(typ string) int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'account_event_notification' AND args->>'type' = $1`, typ).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if got := count(notify.TypeRechargeFailed); got != 3 {
		t.Fatalf("%d recharge.failed, want 3", got)
	}
	if got := count(notify.TypeRechargeDisabled); got != 1 {
		t.Fatalf("%d recharge.disabled, want 1", got)
	}

	// A paused attempt on another account.
	b := lowAccount(t, pool, "acct_paused")
	resolve(b, db.AttemptActionRequired)
	if _, err := sweeper.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := count(notify.TypeRechargeActionRequired); got != 1 {
		t.Fatalf("%d recharge.action_required, want 1", got)
	}
}
