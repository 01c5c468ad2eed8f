package recharge_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/notify"
	"github.com/onceledger/onceledger/internal/recharge"
	"github.com/onceledger/onceledger/internal/stripeevents"
	"github.com/onceledger/onceledger/internal/stripefake"
)

// guardedAccount creates an account holding balance with a saved card and recharge set as s (enabled).
func guardedAccount(t *testing.T, pool *pgxpool.Pool, id string, balance int64, s db.RechargeSettings) {
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
	s.Enabled = true
	if _, err := db.SetRecharge(ctx, pool, id, s); err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }

// post posts usage (a negative amount) or an adjustment (a positive one) keyed key on the account,
// in its own transaction (the trigger runs at its commit).
func post(t testing.TB, pool *pgxpool.Pool, account, key string, amount int64) {
	t.Helper()
	kind := db.KindUsage
	if amount > 0 {
		kind = db.KindAdjustment
	}
	err := db.InTx(context.Background(), pool, func(tx db.Tx) error {
		_, err := new(db.Ledger).Post(context.Background(), tx, db.Posting{
			AccountID: account, Kind: kind, Amount: amount, DedupeKey: account + ":" + key,
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// resolve fails or settles an attempt as the webhook does.
func resolve(t *testing.T, pool *pgxpool.Pool, a db.Attempt, status, declineCode string) {
	t.Helper()
	err := db.InTx(context.Background(), pool, func(tx db.Tx) error {
		_, _, err := db.ResolveAttempt(context.Background(), tx, a, status, "pi_"+fmt.Sprint(a.ID), "card_declined", declineCode)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func attemptsOf(t *testing.T, pool *pgxpool.Pool, account string) []db.Attempt {
	t.Helper()
	attempts, err := db.Attempts(context.Background(), pool, account, 100)
	if err != nil {
		t.Fatal(err)
	}
	return attempts
}

// countOf is the count(*) query answers.
func countOf(t *testing.T, pool *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func statusOf(t *testing.T, pool *pgxpool.Pool, account string) db.RechargeStatus {
	t.Helper()
	s, err := db.GetRechargeStatus(context.Background(), pool, account)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fakeCharger is a Charger calling a stand-in for Stripe, stopped when the test ends.
func fakeCharger(t *testing.T, pool *pgxpool.Pool) (*stripefake.Server, *recharge.Charger) {
	t.Helper()
	fake := stripefake.New()
	t.Cleanup(fake.Close)
	return fake, recharge.NewCharger(pool, stripeevents.NewStripeClient(stripefake.SecretKey, fake.URL, nil), quiet)
}

// chargeAll runs the PaymentIntent job of every attempt swept so far, as River would.
func chargeAll(t *testing.T, pool *pgxpool.Pool, charger *recharge.Charger) {
	t.Helper()
	ctx := context.Background()
	if _, err := enqueueOnlySweeper(t, pool).Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT args->>'account_id', (args->>'attempt_id')::bigint FROM river_job
	                              WHERE kind = 'recharge_payment_intent' AND state = 'available' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	type job struct {
		account string
		attempt int64
	}
	var jobs []job
	for rows.Next() {
		var j job
		if err := rows.Scan(&j.account, &j.attempt); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if err := charger.Charge(ctx, j.account, j.attempt); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now()
		                             WHERE kind = 'recharge_payment_intent' AND (args->>'attempt_id')::bigint = $1`, j.attempt); err != nil {
			t.Fatal(err)
		}
	}
}

// distinct fails unless keys holds want keys, none twice.
func distinct(t *testing.T, keys []string, want int) {
	t.Helper()
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k] {
			t.Fatalf("Idempotency-Key %s sent twice: %v", k, keys)
		}
		seen[k] = true
	}
	if len(keys) != want {
		t.Fatalf("%d PaymentIntent requests %v, want %d", len(keys), keys, want)
	}
}

// 10,000 debits racing through 50 low-balance episodes in one budget window of three attempts: three
// attempts, three PaymentIntents with three keys, and one recharge.blocked per blocked episode.
func TestBudgetCountHoldsUnderTenThousandRacingDebits(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	const (
		account  = "acct_budget_race"
		episodes = 50
		perRound = 200
		racers   = 8
	)
	guardedAccount(t, pool, account, 1000, db.RechargeSettings{
		Threshold: ptr[int64](500), Amount: ptr[int64](100),
		Budget: &db.RechargeBudget{Count: ptr[int32](3), Period: "month"},
	})
	for round := range episodes {
		var wg sync.WaitGroup
		for r := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := r; i < perRound; i += racers {
					post(t, pool, account, fmt.Sprintf("spend:%d:%d", round, i), -5)
				}
			}()
		}
		wg.Wait()
		// Back above the threshold: the next round is a new episode.
		post(t, pool, account, fmt.Sprintf("refill:%d", round), 1000)
	}
	if got := len(attemptsOf(t, pool, account)); got != 3 {
		t.Fatalf("%d attempts in the window, want 3", got)
	}
	if n := countOf(t, pool, `SELECT count(*) FROM recharge_blocks WHERE account_id = $1 AND reason = 'budget_exhausted'`, account); n != episodes-3 {
		t.Fatalf("%d budget_exhausted blocks, want one per blocked episode (%d)", n, episodes-3)
	}
	fake, charger := fakeCharger(t, pool)
	chargeAll(t, pool, charger)
	distinct(t, fake.PaymentIntentKeys(), 3)
	if got := len(fake.PaymentIntents()); got != 3 {
		t.Fatalf("%d PaymentIntents, want 3", got)
	}
	if n := countOf(t, pool, `SELECT count(*) FROM river_job WHERE kind = 'account_event_notification' AND args->>'type' = $1`,
		notify.TypeRechargeBlocked); n != episodes-3 {
		t.Fatalf("%d recharge.blocked notifications, want %d", n, episodes-3)
	}
	if s := statusOf(t, pool, account); s.Status != db.RechargePendingAttempt || s.WindowAttempts != 3 || s.WindowRechargedAmount != 300 {
		t.Fatalf("status %+v, want pending_attempt with 3 attempts and 300 asked in the window", s)
	}
}

// A card that always soft-declines: each try a new attempt and key, the ladder's backoffs scheduled
// on the database clock, at most count attempts per window, then disabled_after_failures.
func TestSoftDeclinesClimbTheLadderWithinTheBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	const account = "acct_ladder"
	guardedAccount(t, pool, account, 1000, db.RechargeSettings{
		Threshold: ptr[int64](500), Amount: ptr[int64](100),
		Budget: &db.RechargeBudget{Count: ptr[int32](2), Period: "month"},
	})
	fake, charger := fakeCharger(t, pool)
	sweeper := enqueueOnlySweeper(t, pool)

	// retryJob sweeps the failure's retry into River, checks it is scheduled after backoff on the
	// database clock, and does its work.
	retryJob := func(failed db.Attempt, backoff time.Duration) {
		t.Helper()
		if _, err := sweeper.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		var (
			args  recharge.RetryArgs
			early bool
		)
		err := pool.QueryRow(ctx, `SELECT args->>'account_id', (args->>'episode')::bigint, (args->>'retry')::int,
		                                  scheduled_at < now() + $2::interval - interval '1 minute'
		                           FROM river_job WHERE kind = 'recharge_retry' AND (args->>'attempt_id')::bigint = $1`,
			failed.ID, backoff.String()).Scan(&args.AccountID, &args.Episode, &args.Retry, &early)
		if err != nil {
			t.Fatalf("retry job of attempt %d: %v", failed.ID, err)
		}
		if early {
			t.Fatalf("retry of attempt %d scheduled before its %s backoff", failed.ID, backoff)
		}
		// The job runs when the retry is due: its time moved back to now.
		if _, err := pool.Exec(ctx, `UPDATE recharge_attempts SET retry_at = now() WHERE account_id = $1 AND id = $2`,
			failed.AccountID, failed.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := db.OpenRetry(ctx, pool, args.AccountID, args.Episode, args.Retry); err != nil {
			t.Fatal(err)
		}
	}

	post(t, pool, account, "spend", -600)
	chargeAll(t, pool, charger)
	first := attemptsOf(t, pool, account)[0]
	resolve(t, pool, first, db.AttemptFailed, "insufficient_funds")
	if s := statusOf(t, pool, account); s.Status != db.RechargeCoolingDown || s.NextEligibleAt == nil {
		t.Fatalf("after a soft decline: %+v, want cooling_down until the retry", s)
	}
	retryJob(first, time.Hour)
	attempts := attemptsOf(t, pool, account)
	if len(attempts) != 2 || attempts[0].Retry != 1 {
		t.Fatalf("after the 1h retry: %+v", attempts)
	}
	chargeAll(t, pool, charger)
	resolve(t, pool, attempts[0], db.AttemptFailed, "insufficient_funds")
	retryJob(attempts[0], 6*time.Hour)
	// The window's budget of two attempts is spent: the third try waits for the next window.
	if got := len(attemptsOf(t, pool, account)); got != 2 {
		t.Fatalf("%d attempts in a window of two", got)
	}
	if s := statusOf(t, pool, account); s.Status != db.RechargeBudgetExhausted || s.NextEligibleAt == nil || s.WindowAttempts != 2 {
		t.Fatalf("after the budget: %+v, want budget_exhausted until the next window", s)
	}
	// The next window: the window's row moved back a month, then the next debit makes the third try.
	if _, err := pool.Exec(ctx, `UPDATE recharge_windows SET window_start = date_trunc('month', now(), 'UTC') - interval '1 month' WHERE account_id = $1`, account); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE recharge_blocks SET next_eligible_at = now() - interval '1 second' WHERE account_id = $1`, account); err != nil {
		t.Fatal(err)
	}
	post(t, pool, account, "spend-more", -1)
	attempts = attemptsOf(t, pool, account)
	if len(attempts) != 3 || attempts[0].Retry != 2 {
		t.Fatalf("in the next window: %+v", attempts)
	}
	chargeAll(t, pool, charger)
	resolve(t, pool, attempts[0], db.AttemptFailed, "insufficient_funds")
	if s := statusOf(t, pool, account); s.Status != db.RechargeDisabledAfterFailures {
		t.Fatalf("after three failures: %+v", s)
	}
	distinct(t, fake.PaymentIntentKeys(), 3)
	// Disabled: debits make nothing more, and no retry is scheduled.
	post(t, pool, account, "spend-after", -1)
	if got := len(attemptsOf(t, pool, account)); got != 3 {
		t.Fatalf("%d attempts after recharge was disabled", got)
	}
	if n := countOf(t, pool, `SELECT count(*) FROM recharge_attempts WHERE account_id = $1 AND retry_at IS NOT NULL AND retry_enqueued_at IS NULL`,
		account); n != 0 {
		t.Fatalf("%d retries scheduled after the third failure", n)
	}
}

// A hard decline forgets the card and stops recharge at the first failure, with no retry.
func TestHardDeclineStopsAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	const account = "acct_stolen"
	guardedAccount(t, pool, account, 1000, db.RechargeSettings{Threshold: ptr[int64](500), Amount: ptr[int64](100)})
	post(t, pool, account, "spend", -600)
	a := attemptsOf(t, pool, account)[0]
	resolve(t, pool, a, db.AttemptFailed, "stolen_card")
	if s := statusOf(t, pool, account); s.Status != db.RechargePaymentMethodRequired {
		t.Fatalf("after a hard decline: %+v", s)
	}
	settings, err := db.GetAutomation(ctx, pool, account)
	if err != nil || settings.PaymentMethod != "" || settings.RechargeEnabled {
		t.Fatalf("after a hard decline: %+v, %v: the card is forgotten and recharge off", settings, err)
	}
	if got := attemptsOf(t, pool, account)[0]; got.RetryAt != nil || !got.HardDecline || !got.DisabledRecharge {
		t.Fatalf("the hard decline: %+v", got)
	}
	// Only a PUT enables again, and only with a card.
	_, err = db.SetRecharge(ctx, pool, account, db.RechargeSettings{Enabled: true, Threshold: ptr[int64](500), Amount: ptr[int64](100)})
	if err == nil {
		t.Fatal("recharge enabled again without a card")
	}
	if _, err := enqueueOnlySweeper(t, pool).Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	var reason string
	if err := pool.QueryRow(ctx, `SELECT args->'data'->>'reason' FROM river_job WHERE args->>'type' = $1`,
		notify.TypeRechargeDisabled).Scan(&reason); err != nil || reason != db.RechargePaymentMethodRequired {
		t.Fatalf("recharge.disabled reason %q, %v", reason, err)
	}
}

// Inside the cooldown no attempt is made: the status says cooling_down until when, and one
// recharge.blocked is recorded for the episode however many debits asked.
func TestCooldownBlocksUntilNextEligible(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	const account = "acct_cool"
	guardedAccount(t, pool, account, 1000, db.RechargeSettings{
		Threshold: ptr[int64](500), Amount: ptr[int64](100), Cooldown: time.Hour,
	})
	post(t, pool, account, "spend:0", -600)
	first := attemptsOf(t, pool, account)[0]
	resolve(t, pool, first, db.AttemptSucceeded, "")
	post(t, pool, account, "refill", 600) // a new episode
	for i := range 5 {
		post(t, pool, account, fmt.Sprintf("spend:1:%d", i), -200)
	}
	if got := len(attemptsOf(t, pool, account)); got != 1 {
		t.Fatalf("%d attempts inside the cooldown, want 1", got)
	}
	s := statusOf(t, pool, account)
	want := first.CreatedAt.Add(time.Hour)
	if s.Status != db.RechargeCoolingDown || s.NextEligibleAt == nil || !s.NextEligibleAt.Equal(want) {
		t.Fatalf("status %+v, want cooling_down until %s", s, want)
	}
	if n := countOf(t, pool, `SELECT count(*) FROM recharge_blocks WHERE account_id = $1 AND reason = 'cooling_down'`, account); n != 1 {
		t.Fatalf("%d cooling_down blocks, want 1", n)
	}
	// The cooldown over (its end moved back to now): the next debit makes the attempt.
	if _, err := pool.Exec(ctx, `UPDATE accounts SET recharge_next_eligible_at = now() WHERE id = $1`, account); err != nil {
		t.Fatal(err)
	}
	post(t, pool, account, "spend:2", -1)
	if got := len(attemptsOf(t, pool, account)); got != 2 {
		t.Fatalf("%d attempts after the cooldown, want 2", got)
	}
}

// target mode: one charge of exactly what brings available back to the target, open holds and debt
// included; never below Stripe's minimum charge.
func TestTargetModeChargesTheShortfallOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	const account = "acct_target"
	guardedAccount(t, pool, account, 1000, db.RechargeSettings{
		Threshold: ptr[int64](500), Amount: ptr[int64](100), Mode: db.RechargeTarget, Target: ptr[int64](2000),
	})
	if _, err := db.AuthoriseHold(ctx, pool, account, db.HoldRequest{ID: "h1", Amount: 300, ExpiresIn: time.Hour}); err != nil {
		t.Fatal(err)
	}
	post(t, pool, account, "usage", -1200) // balance -200 (debt), held 300: available -500
	attempts := attemptsOf(t, pool, account)
	if len(attempts) != 1 || attempts[0].Amount != 2500 {
		t.Fatalf("attempts %+v, want one of 2500 (2000 - (-200 - 300))", attempts)
	}
	fake, charger := fakeCharger(t, pool)
	chargeAll(t, pool, charger)
	if intents := fake.PaymentIntents(); len(intents) != 1 || intents[0].Get("amount") != "2500" {
		t.Fatalf("PaymentIntents %v, want one of 2500", intents)
	}

	// A shortfall below Stripe's minimum charge (50 for usd) asks the minimum.
	const small = "acct_target_small"
	guardedAccount(t, pool, small, 1000, db.RechargeSettings{
		Threshold: ptr[int64](500), Amount: ptr[int64](100), Mode: db.RechargeTarget, Target: ptr[int64](510),
	})
	post(t, pool, small, "usage", -501) // available 499
	if got := attemptsOf(t, pool, small); len(got) != 1 || got[0].Amount != 50 {
		t.Fatalf("attempts %+v, want one of Stripe's minimum, 50", got)
	}
}

// A refused request (4xx) or a decline that Stripe answers fails the attempt at once, without waiting
// for a webhook, and the failure ladder tries again under a new key; Stripe's own error (5xx) is
// retried under the same key, since Stripe may have acted.
func TestStripeAnswersResolveTheAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	const account = "acct_stripe_answers"
	guardedAccount(t, pool, account, 1000, db.RechargeSettings{Threshold: ptr[int64](500), Amount: ptr[int64](100)})
	fake, charger := fakeCharger(t, pool)
	post(t, pool, account, "spend", -600)
	var keys []string
	for i, status := range []int{http.StatusBadRequest, http.StatusPaymentRequired} {
		a := attemptsOf(t, pool, account)[0]
		if a.Retry != int32(i) {
			t.Fatalf("try %d is %+v", i, a)
		}
		keys = append(keys, recharge.IdempotencyKey(a.ID))
		fake.FailWith(status)
		if err := charger.Charge(ctx, account, a.ID); err != nil {
			t.Fatalf("Stripe's %d was not taken as the attempt's answer: %v", status, err)
		}
		a = attemptsOf(t, pool, account)[0]
		if a.Status != db.AttemptFailed || a.RetryAt == nil || a.FailureCode == "" {
			t.Fatalf("after Stripe's %d: %+v, want failed with a retry scheduled", status, a)
		}
		if _, err := db.OpenRetry(ctx, pool, account, a.Episode, a.Retry); err != nil {
			t.Fatal(err)
		}
	}
	a := attemptsOf(t, pool, account)[0]
	keys = append(keys, recharge.IdempotencyKey(a.ID))
	fake.FailWith(http.StatusInternalServerError)
	if err := charger.Charge(ctx, account, a.ID); err == nil {
		t.Fatal("Stripe's 500 was taken as an answer")
	}
	if got := attemptsOf(t, pool, account)[0]; got.Status != db.AttemptRequested {
		t.Fatalf("after Stripe's 500: %+v, want requested (retried under its key)", got)
	}
	fake.FailWith(0)
	if err := charger.Charge(ctx, account, a.ID); err != nil {
		t.Fatal(err)
	}
	distinct(t, keys, 3)
	if got := fake.PaymentIntentKeys(); len(got) != 1 || got[0] != keys[2] {
		t.Fatalf("PaymentIntents created under %v, want one under %s", got, keys[2])
	}
}
