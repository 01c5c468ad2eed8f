package recharge_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/notify"
)

// changesOf lists the account's recorded status changes as "from>to:reason", in order.
func changesOf(t *testing.T, pool *pgxpool.Pool, account string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT from_status || '>' || to_status || ':' || reason
	                                               FROM recharge_status_changes WHERE account_id = $1 ORDER BY seq`, account)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// expectChanges checks that the account's changes so far are want, and that the stored status is the
// one GET answers.
func expectChanges(t *testing.T, pool *pgxpool.Pool, account string, want ...string) {
	t.Helper()
	if got := changesOf(t, pool, account); !slices.Equal(got, want) {
		t.Fatalf("status changes of %s:\n got %v\nwant %v", account, got, want)
	}
	var stored string
	var storedNext *time.Time
	err := pool.QueryRow(context.Background(), `SELECT recharge_status, recharge_status_next_eligible_at FROM accounts WHERE id = $1`,
		account).Scan(&stored, &storedNext)
	if err != nil {
		t.Fatal(err)
	}
	s := statusOf(t, pool, account)
	if stored != s.Status || (storedNext == nil) != (s.NextEligibleAt == nil) || (storedNext != nil && !storedNext.Equal(*s.NextEligibleAt)) {
		t.Fatalf("stored status %s until %v, GET answers %s until %v", stored, storedNext, s.Status, s.NextEligibleAt)
	}
}

// setRecharge PUTs the settings.
func setRecharge(t *testing.T, pool *pgxpool.Pool, account string, s db.RechargeSettings) {
	t.Helper()
	if _, err := db.SetRecharge(context.Background(), pool, account, s); err != nil {
		t.Fatal(err)
	}
}

// lastAttempt is the account's newest attempt.
func lastAttempt(t *testing.T, pool *pgxpool.Pool, account string) db.Attempt {
	t.Helper()
	return attemptsOf(t, pool, account)[0]
}

// elapse moves the end of the account's cooldown, retry and budget window into the past, as time
// would, and the stored status's end with them.
func elapse(t *testing.T, pool *pgxpool.Pool, account string) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		`UPDATE accounts SET recharge_next_eligible_at = now() - interval '1 second',
		        recharge_status_next_eligible_at = now() - interval '1 second' WHERE id = $1 AND recharge_status_next_eligible_at IS NOT NULL`,
		`UPDATE recharge_attempts SET retry_at = now() - interval '1 second' WHERE account_id = $1 AND retry_at IS NOT NULL`,
		`UPDATE recharge_windows SET window_start = timestamptz '2000-01-01 00:00Z' WHERE account_id = $1`,
		`UPDATE recharge_blocks SET next_eligible_at = now() - interval '1 second' WHERE account_id = $1`,
	} {
		if _, err := pool.Exec(ctx, q, account); err != nil {
			t.Fatal(err)
		}
	}
}

// endElapsed runs the sweep's first step, moving the statuses whose time has come.
func endElapsed(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	n, err := db.EndElapsedRechargeStatuses(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// statusNotices counts the recharge.status_changed notifications enqueued for the account.
func statusNotices(t *testing.T, pool *pgxpool.Pool, account string) int {
	t.Helper()
	return countOf(t, pool, `SELECT count(*) FROM river_job WHERE kind = 'account_event_notification'
	                         AND args->>'type' = $1 AND args->>'account_id' = $2`, notify.TypeRechargeStatusChanged, account)
}

// Every transition of SPEC §17's status list is recorded once, in the transaction that makes it (a
// PUT, an attempt made or resolved, a block, a new episode) or by the sweep when its time has come
// (a cooldown ending, a budget window rolling over), and each becomes one notification. After each
// step the stored status is the one GET computes.
func TestEveryStatusChangeToldOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	sweeper := enqueueOnlySweeper(t, pool)

	// A cooldown: enabled by a PUT, an attempt, its success, the cooldown's end; a PUT off and on.
	const cool = "acct_status_cool"
	settings := db.RechargeSettings{Threshold: ptr[int64](500), Amount: ptr[int64](100), Cooldown: time.Hour}
	guardedAccount(t, pool, cool, 1000, settings)
	expectChanges(t, pool, cool, "off>ready:settings")
	post(t, pool, cool, "spend", -600)
	expectChanges(t, pool, cool, "off>ready:settings", "ready>pending_attempt:attempt_requested")
	resolve(t, pool, lastAttempt(t, pool, cool), db.AttemptSucceeded, "")
	coolSoFar := []string{"off>ready:settings", "ready>pending_attempt:attempt_requested", "pending_attempt>cooling_down:attempt_succeeded"}
	expectChanges(t, pool, cool, coolSoFar...)
	if n := endElapsed(t, pool); n != 0 {
		t.Fatalf("the sweep ended %d statuses inside the cooldown", n)
	}
	elapse(t, pool, cool)
	if n := endElapsed(t, pool); n != 1 {
		t.Fatalf("the sweep ended %d statuses after the cooldown, want 1", n)
	}
	coolSoFar = append(coolSoFar, "cooling_down>ready:cooldown_ended")
	expectChanges(t, pool, cool, coolSoFar...)
	setRecharge(t, pool, cool, db.RechargeSettings{Enabled: true, Threshold: ptr[int64](500), Amount: ptr[int64](200)})
	expectChanges(t, pool, cool, coolSoFar...) // settings that leave the status as it is: nothing
	setRecharge(t, pool, cool, db.RechargeSettings{Enabled: false, Threshold: ptr[int64](500), Amount: ptr[int64](100)})
	setRecharge(t, pool, cool, db.RechargeSettings{Enabled: true, Threshold: ptr[int64](500), Amount: ptr[int64](100)})
	coolSoFar = append(coolSoFar, "ready>off:settings", "off>ready:settings")
	expectChanges(t, pool, cool, coolSoFar...)

	// A budget of one attempt a day: exhausted by the first, told again when a debit is refused in a new
	// episode, ready when the window rolls over.
	const budget = "acct_status_budget"
	guardedAccount(t, pool, budget, 1000, db.RechargeSettings{
		Threshold: ptr[int64](500), Amount: ptr[int64](100),
		Budget: &db.RechargeBudget{Count: ptr[int32](1), Period: "day"},
	})
	post(t, pool, budget, "spend", -600)
	resolve(t, pool, lastAttempt(t, pool, budget), db.AttemptSucceeded, "")
	budgetSoFar := []string{"off>ready:settings", "ready>pending_attempt:attempt_requested", "pending_attempt>budget_exhausted:attempt_succeeded"}
	expectChanges(t, pool, budget, budgetSoFar...)
	post(t, pool, budget, "refill", 600) // a new episode: still exhausted, nothing told
	post(t, pool, budget, "spend:2", -600)
	if got := len(attemptsOf(t, pool, budget)); got != 1 {
		t.Fatalf("%d attempts beyond the budget", got)
	}
	expectChanges(t, pool, budget, budgetSoFar...)
	elapse(t, pool, budget)
	if n := endElapsed(t, pool); n != 1 {
		t.Fatalf("the sweep ended %d statuses after the window, want 1", n)
	}
	budgetSoFar = append(budgetSoFar, "budget_exhausted>ready:window_ended")
	expectChanges(t, pool, budget, budgetSoFar...)

	// A hard decline: payment_method_required at once.
	const hard = "acct_status_hard"
	guardedAccount(t, pool, hard, 1000, db.RechargeSettings{Threshold: ptr[int64](500), Amount: ptr[int64](100)})
	post(t, pool, hard, "spend", -600)
	resolve(t, pool, lastAttempt(t, pool, hard), db.AttemptFailed, "stolen_card")
	hardSoFar := []string{"off>ready:settings", "ready>pending_attempt:attempt_requested",
		"pending_attempt>payment_method_required:attempt_failed"}
	expectChanges(t, pool, hard, hardSoFar...)

	// Three soft failures: the ladder's retries (each due, then opened), then disabled_after_failures;
	// a PUT enables again.
	const soft = "acct_status_soft"
	guardedAccount(t, pool, soft, 1000, db.RechargeSettings{Threshold: ptr[int64](500), Amount: ptr[int64](100)})
	post(t, pool, soft, "spend", -600)
	softSoFar := []string{"off>ready:settings", "ready>pending_attempt:attempt_requested"}
	for try := range 3 {
		a := lastAttempt(t, pool, soft)
		resolve(t, pool, a, db.AttemptFailed, "insufficient_funds")
		if try == 2 {
			softSoFar = append(softSoFar, "pending_attempt>disabled_after_failures:attempt_failed")
			break
		}
		softSoFar = append(softSoFar, "pending_attempt>cooling_down:attempt_failed")
		elapse(t, pool, soft)
		endElapsed(t, pool)
		softSoFar = append(softSoFar, "cooling_down>ready:cooldown_ended")
		if opened, err := db.OpenRetry(ctx, pool, soft, a.Episode, a.Retry); err != nil || !opened {
			t.Fatalf("retry %d not opened: %v", try+1, err)
		}
		softSoFar = append(softSoFar, "ready>pending_attempt:attempt_requested")
		expectChanges(t, pool, soft, softSoFar...)
	}
	expectChanges(t, pool, soft, softSoFar...)
	setRecharge(t, pool, soft, db.RechargeSettings{Enabled: true, Threshold: ptr[int64](500), Amount: ptr[int64](100)})
	softSoFar = append(softSoFar, "disabled_after_failures>ready:settings")
	expectChanges(t, pool, soft, softSoFar...)

	// A card that needs its customer: requires_action, until available is back (a new episode).
	const action = "acct_status_action"
	guardedAccount(t, pool, action, 1000, db.RechargeSettings{Threshold: ptr[int64](500), Amount: ptr[int64](100)})
	post(t, pool, action, "spend", -600)
	resolve(t, pool, lastAttempt(t, pool, action), db.AttemptActionRequired, "")
	post(t, pool, action, "refill", 600)
	actionSoFar := []string{"off>ready:settings", "ready>pending_attempt:attempt_requested",
		"pending_attempt>requires_action:attempt_action_required", "requires_action>ready:episode_ended"}
	expectChanges(t, pool, action, actionSoFar...)

	// Each change is one notification, however often the outbox is swept.
	for range 2 {
		if _, err := sweeper.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for account, changes := range map[string][]string{
		cool: coolSoFar, budget: budgetSoFar, hard: hardSoFar, soft: softSoFar, action: actionSoFar,
	} {
		if got := statusNotices(t, pool, account); got != len(changes) {
			t.Errorf("%s: %d recharge.status_changed for %d changes", account, got, len(changes))
		}
	}
	var data map[string]any
	err := pool.QueryRow(ctx, `SELECT args->'data' FROM river_job WHERE args->>'id' = $1`,
		fmt.Sprintf("ntf_recharge_status_%s_%d", budget, 3)).Scan(&data)
	if err != nil {
		t.Fatal(err)
	}
	if data["account_id"] != budget || data["from"] != db.RechargePendingAttempt || data["to"] != db.RechargeBudgetExhausted ||
		data["reason"] != "attempt_succeeded" || data["next_eligible_at"] == nil {
		t.Fatalf("recharge.status_changed payload %v", data)
	}
}

// Sweeps racing over the same elapsed statuses record each change once: the conditional UPDATE of
// recharge_status_sync lets one of them move a status, and recharge_status_changes_pkey keys it.
func TestRacingSweepsEndEachStatusOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	const accounts = 20
	for i := range accounts {
		account := fmt.Sprintf("acct_race_%02d", i)
		guardedAccount(t, pool, account, 1000, db.RechargeSettings{
			Threshold: ptr[int64](500), Amount: ptr[int64](100), Cooldown: time.Hour,
		})
		post(t, pool, account, "spend", -600)
		resolve(t, pool, lastAttempt(t, pool, account), db.AttemptSucceeded, "")
		elapse(t, pool, account)
	}
	var wg sync.WaitGroup
	ended := make([]int, 4)
	for i := range ended {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := db.EndElapsedRechargeStatuses(ctx, pool)
			if err != nil {
				t.Error(err)
			}
			ended[i] = n
		}()
	}
	wg.Wait()
	var total int
	for _, n := range ended {
		total += n
	}
	if total != accounts {
		t.Fatalf("racing sweeps ended %v statuses, want %d together", ended, accounts)
	}
	if n := countOf(t, pool, `SELECT count(*) FROM recharge_status_changes WHERE reason = 'cooldown_ended'`); n != accounts {
		t.Fatalf("%d cooldown_ended changes recorded, want %d", n, accounts)
	}
	sweeper := enqueueOnlySweeper(t, pool)
	var wgSweep sync.WaitGroup
	for range 2 {
		wgSweep.Add(1)
		go func() {
			defer wgSweep.Done()
			if _, err := sweeper.Sweep(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wgSweep.Wait()
	for i := range accounts {
		account := fmt.Sprintf("acct_race_%02d", i)
		expectChanges(t, pool, account, "off>ready:settings", "ready>pending_attempt:attempt_requested",
			"pending_attempt>cooling_down:attempt_succeeded", "cooling_down>ready:cooldown_ended")
		if got := statusNotices(t, pool, account); got != 4 {
			t.Fatalf("%s: %d recharge.status_changed, want 4", account, got)
		}
	}
}
