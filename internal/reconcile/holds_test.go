package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/reconcile"
)

// newFundedAccount creates the account with credit as its signup grant.
func newFundedAccount(tb testing.TB, pool *pgxpool.Pool, id string, credit int64) {
	tb.Helper()
	if _, err := dbtest.Ledger(tb, pool).CreateAccount(context.Background(), id, "usd", credit); err != nil {
		tb.Fatal(err)
	}
}

func mustAuthorise(tb testing.TB, pool *pgxpool.Pool, account, hold string, amount int64, ttl time.Duration) {
	tb.Helper()
	if _, err := db.AuthoriseHold(context.Background(), pool, account, db.HoldRequest{ID: hold, Amount: amount, ExpiresIn: ttl}); err != nil {
		tb.Fatalf("authorise %s/%s: %v", account, hold, err)
	}
}

// storeDecision stores one decision, naming hold unless it is empty.
func storeDecision(tb testing.TB, pool *pgxpool.Pool, id, account string, cost int64, hold string) {
	tb.Helper()
	store(tb, pool, db.Decision{ID: id, AccountID: account, Cost: cost, HoldID: hold})
}

func holdOf(tb testing.TB, pool *pgxpool.Pool, account, hold string) db.Hold {
	tb.Helper()
	h, err := db.GetHold(context.Background(), pool, account, hold)
	if err != nil {
		tb.Fatalf("hold %s/%s: %v", account, hold, err)
	}
	return h
}

func wantAccount(tb testing.TB, pool *pgxpool.Pool, id string, balance, held int64) {
	tb.Helper()
	a, err := db.GetAccount(context.Background(), pool, id)
	if err != nil {
		tb.Fatal(err)
	}
	if a.Balance != balance || a.Held != held {
		tb.Fatalf("%s: balance %d held %d, want %d and %d", id, a.Balance, a.Held, balance, held)
	}
}

func wantVerified(tb testing.TB, pool *pgxpool.Pool) {
	tb.Helper()
	violations, err := db.Verify(context.Background(), pool, time.Now(), time.Hour, time.Hour)
	if err != nil || len(violations) > 0 {
		tb.Fatalf("verify: %v %v", violations, err)
	}
}

// Billing a decision that names a hold captures the hold in the same transaction, once; a hold
// resolved otherwise first is left as it was, and the decision is billed in full, except for a hold
// captured through the API: that capture paid for the work up to its amount, and the decision is billed
// only its cost beyond it (SPEC §21), so no hold is paid twice.
func TestBillingDecisionCapturesItsHold(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	newFundedAccount(t, pool, "acct_d", 1000)
	for _, h := range []string{"within", "above", "voided", "captured", "captured_short", "twice"} {
		mustAuthorise(t, pool, "acct_d", h, 40, time.Hour)
	}
	if _, err := db.VoidHold(ctx, pool, "acct_d", "voided"); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"captured", "captured_short"} {
		if _, err := dbtest.Ledger(t, pool).CaptureHold(ctx, "acct_d", h, 20); err != nil {
			t.Fatal(err)
		}
	}
	storeDecision(t, pool, "d_within", "acct_d", 37, "within")
	storeDecision(t, pool, "d_above", "acct_d", 50, "above")
	storeDecision(t, pool, "d_voided", "acct_d", 10, "voided")
	storeDecision(t, pool, "d_captured", "acct_d", 5, "captured")
	storeDecision(t, pool, "d_captured_short", "acct_d", 30, "captured_short")
	storeDecision(t, pool, "d_twice_1", "acct_d", 7, "twice")
	storeDecision(t, pool, "d_twice_2", "acct_d", 8, "twice")
	storeDecision(t, pool, "d_unknown", "acct_d", 3, "never-authorised")
	wantAccount(t, pool, "acct_d", 960, 120)

	m := reconcile.NewMetrics(nil)
	r := reconcile.New(reconcile.Deps{Pool: pool, Ledger: dbtest.Ledger(t, pool), Metrics: m}, reconcile.Options{})
	rep, err := r.Bill(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	// d_captured costs less than its hold's API capture: nothing more to bill.
	if rep.Billed != 7 || rep.HoldsCaptured != 3 || rep.CostsAboveHold != 1 {
		t.Fatalf("billing: %+v", rep)
	}
	// 1000 - 20 - 20 (API captures) - 37 - 50 - 10 - 0 - (30 - 20) - 7 - 8 - 3, and nothing left held.
	wantAccount(t, pool, "acct_d", 835, 0)
	for key, want := range map[string]int64{"decision:d_captured_short": -10, "decision:d_above": -50} {
		e, err := db.EntryByDedupeKey(ctx, pool, key)
		if err != nil || e.Amount != want {
			t.Fatalf("%s: %+v %v, want %d", key, e, err, want)
		}
	}
	if _, err := db.EntryByDedupeKey(ctx, pool, "decision:d_captured"); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("decision:d_captured: %v, want no entry (its hold's capture paid for it)", err)
	}
	for hold, want := range map[string]db.Hold{
		"within":         {Status: db.HoldCaptured, CapturedAmount: 37, DecisionID: "d_within"},
		"above":          {Status: db.HoldCaptured, CapturedAmount: 40, DecisionID: "d_above"},
		"voided":         {Status: db.HoldVoided},
		"captured":       {Status: db.HoldCaptured, CapturedAmount: 20},
		"captured_short": {Status: db.HoldCaptured, CapturedAmount: 20},
		"twice":          {Status: db.HoldCaptured, CapturedAmount: 7, DecisionID: "d_twice_1"},
	} {
		got := holdOf(t, pool, "acct_d", hold)
		if got.Status != want.Status || got.CapturedAmount != want.CapturedAmount || got.DecisionID != want.DecisionID {
			t.Fatalf("hold %s: %+v, want %+v", hold, got, want)
		}
	}
	// Resolved by its decision, the hold is answered as such through the API, never twice.
	if _, err := dbtest.Ledger(t, pool).CaptureHold(ctx, "acct_d", "within", 37); !errors.Is(err, db.ErrHoldCaptured) {
		t.Fatalf("capture after its decision: %v, want ErrHoldCaptured", err)
	}
	if _, err := db.VoidHold(ctx, pool, "acct_d", "above"); !errors.Is(err, db.ErrHoldCaptured) {
		t.Fatalf("void after its decision: %v, want ErrHoldCaptured", err)
	}
	again, err := r.Bill(ctx, 0)
	if err != nil || again.Billed != 0 || again.HoldsCaptured != 0 {
		t.Fatalf("re-read: %+v %v", again, err)
	}
	wantAccount(t, pool, "acct_d", 835, 0)
	wantVerified(t, pool)
}

// A decision received after its hold expired does not capture it: the expiry releases it, and the
// decision is billed in full.
func TestBillingDecisionAfterExpiryLeavesTheHold(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	newFundedAccount(t, pool, "acct_late", 100)
	mustAuthorise(t, pool, "acct_late", "h", 40, time.Second)
	time.Sleep(1100 * time.Millisecond)
	storeDecision(t, pool, "d_late", "acct_late", 30, "h")

	rep, err := reconcile.New(reconcile.Deps{Pool: pool, Ledger: dbtest.Ledger(t, pool)}, reconcile.Options{}).Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Bill.Billed != 1 || rep.Bill.HoldsCaptured != 0 || rep.Expired.Holds != 1 || rep.Expired.Released != 40 {
		t.Fatalf("pass: %+v", rep)
	}
	if h := holdOf(t, pool, "acct_late", "h"); h.Status != db.HoldExpired {
		t.Fatalf("hold %+v", h)
	}
	wantAccount(t, pool, "acct_late", 70, 0)
	wantVerified(t, pool)
}

// Captures racing the expiry pass: every hold is resolved exactly once, by one or the other, and
// each capture's answer says which.
func TestHoldCaptureRacingExpiryResolvesOnce(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	const holds = 40
	newFundedAccount(t, pool, "acct_x", 10_000)
	newFundedAccount(t, pool, "acct_y", 10_000)
	for i := range holds {
		mustAuthorise(t, pool, []string{"acct_x", "acct_y"}[i%2], fmt.Sprintf("h%d", i), 10, 2*time.Second)
	}
	// Start just before the first hold's time is up on the database clock.
	var untilExpiryUS int64
	if err := pool.QueryRow(ctx, `SELECT (extract(epoch FROM min(expires_at) - clock_timestamp()) * 1e6)::bigint FROM holds`).Scan(&untilExpiryUS); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Duration(untilExpiryUS)*time.Microsecond - 30*time.Millisecond)

	captured := make([]error, holds)
	var wg sync.WaitGroup
	for i := range holds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 2 * time.Millisecond)
			_, captured[i] = dbtest.Ledger(t, pool).CaptureHold(ctx, []string{"acct_x", "acct_y"}[i%2], fmt.Sprintf("h%d", i), 7)
		}()
	}
	stop := make(chan struct{})
	var expired int64
	var expireErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			out, err := db.ExpireHolds(ctx, pool)
			if err != nil {
				expireErr = err
				return
			}
			expired += out.Holds
		}
	}()
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	if expireErr != nil {
		t.Fatal(expireErr)
	}
	final, err := db.ExpireHolds(ctx, pool) // whatever was captured neither before nor after
	if err != nil {
		t.Fatal(err)
	}
	expired += final.Holds

	var nCaptured, nExpired int64
	for i, err := range captured {
		h := holdOf(t, pool, []string{"acct_x", "acct_y"}[i%2], fmt.Sprintf("h%d", i))
		switch {
		case err == nil && h.Status == db.HoldCaptured && h.CapturedAmount == 7:
			nCaptured++
		case errors.Is(err, db.ErrHoldExpired) && h.Status == db.HoldExpired:
			nExpired++
		default:
			t.Fatalf("hold %d: capture answered %v, hold is %+v", i, err, h)
		}
	}
	// Captures that found the hold past its time expired it themselves.
	if nCaptured+nExpired != holds || expired > nExpired {
		t.Fatalf("%d captured, %d expired (%d by the pass), of %d", nCaptured, nExpired, expired, holds)
	}
	t.Logf("%d captured, %d expired (%d by the pass)", nCaptured, nExpired, expired)
	var balances int64
	if err := pool.QueryRow(ctx, `SELECT sum(balance) + sum(held) FROM accounts`).Scan(&balances); err != nil {
		t.Fatal(err)
	}
	if balances != 20_000-7*nCaptured {
		t.Fatalf("balances and held sum to %d, want %d", balances, 20_000-7*nCaptured)
	}
	wantVerified(t, pool)
}

// TestHoldsRandomSequences runs, for many seeds, workers that authorise, capture, void, let holds
// expire, run the expiry pass, report decisions naming holds, bill and credit, in random order and
// at once on a few accounts. Whatever the interleaving, every answer must be one the API allows, the
// final state must agree with every answer given, and every invariant verify checks must hold.
func TestHoldsRandomSequences(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	r := reconcile.New(reconcile.Deps{Pool: pool, Ledger: dbtest.Ledger(t, pool)}, reconcile.Options{})
	const seeds = 24
	for seed := range uint64(seeds) {
		runRandomSequence(t, pool, r, seed)
		if t.Failed() {
			return
		}
	}
}

// answers collects what the workers were told, per hold.
type answers struct {
	mu       sync.Mutex
	captures map[string][]int64 // captured amounts answered (posted or replayed)
	voids    map[string]int     // voids answered OK
	credits  map[string]int64   // per account
}

func (a *answers) add(fn func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	fn()
}

func runRandomSequence(t *testing.T, pool *pgxpool.Pool, r *reconcile.Reconciler, seed uint64) {
	ctx := context.Background()
	const (
		accounts = 3
		holdIDs  = 8
		workers  = 4
		ops      = 30
	)
	account := func(i int) string { return fmt.Sprintf("s%d_acct_%d", seed, i) }
	got := &answers{captures: map[string][]int64{}, voids: map[string]int{}, credits: map[string]int64{}}
	for i := range accounts {
		newFundedAccount(t, pool, account(i), 100)
		got.credits[account(i)] = 100
	}
	allowed := func(err error, sentinels ...error) bool {
		for _, s := range sentinels {
			if errors.Is(err, s) {
				return true
			}
		}
		return err == nil
	}

	var wg sync.WaitGroup
	errs := make(chan error, workers*ops)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for op := range ops {
				acct := account(rng.IntN(accounts))
				hold := fmt.Sprintf("h%d", rng.IntN(holdIDs))
				key := acct + "/" + hold
				var err error
				switch rng.IntN(9) {
				case 0, 1:
					ttl := 15 * time.Minute
					if rng.IntN(4) == 0 {
						ttl = time.Second
					}
					_, err = db.AuthoriseHold(ctx, pool, acct, db.HoldRequest{ID: hold, Amount: 1 + rng.Int64N(60), ExpiresIn: ttl})
					if !allowed(err, db.ErrInsufficientBalance, db.ErrDedupeConflict) {
						errs <- fmt.Errorf("authorise %s: %w", key, err)
					}
				case 2, 3:
					amount := rng.Int64N(70) // 0: all of it
					var out db.HoldCapturedResult
					out, err = dbtest.Ledger(t, pool).CaptureHold(ctx, acct, hold, amount)
					if err == nil {
						got.add(func() { got.captures[key] = append(got.captures[key], out.Hold.CapturedAmount) })
					} else if !allowed(err, db.ErrHoldNotFound, db.ErrHoldCaptured, db.ErrHoldVoided, db.ErrHoldExpired,
						db.ErrAmountExceedsHold, db.ErrDedupeConflict) {
						errs <- fmt.Errorf("capture %s: %w", key, err)
					}
				case 4:
					_, err = db.VoidHold(ctx, pool, acct, hold)
					if err == nil {
						got.add(func() { got.voids[key]++ })
					} else if !allowed(err, db.ErrHoldNotFound, db.ErrHoldCaptured, db.ErrHoldExpired) {
						errs <- fmt.Errorf("void %s: %w", key, err)
					}
				case 5:
					// Time passes for this hold: its expiry moves to just now, never later than it was.
					// (Moved later, a hold a capture found expired could be unexpired by the time
					// the capture expires it: time going backwards, which the database clock never does.)
					_, err = pool.Exec(ctx, `UPDATE holds SET expires_at = clock_timestamp() - interval '1 millisecond'
						WHERE account_id = $1 AND id = $2 AND status = 'held'
						  AND created_at < clock_timestamp() - interval '1 millisecond'
						  AND expires_at > clock_timestamp() - interval '1 millisecond'`, acct, hold)
				case 6:
					if rng.IntN(2) == 0 {
						_, err = db.ExpireHolds(ctx, pool)
					} else {
						_, err = r.Bill(ctx, 0)
					}
				case 7:
					named := hold
					if rng.IntN(4) == 0 {
						named = ""
					}
					storeDecision(t, pool, fmt.Sprintf("s%d_w%d_d%d", seed, w, op), acct, 1+rng.Int64N(80), named)
				case 8:
					credit := 1 + rng.Int64N(50)
					err = db.InTx(ctx, pool, func(tx pgx.Tx) error {
						_, err := new(db.Ledger).Post(ctx, tx, db.Posting{AccountID: acct, Kind: db.KindAdjustment, Amount: credit,
							DedupeKey: fmt.Sprintf("test:s%d_w%d_op%d", seed, w, op)})
						return err
					})
					if err == nil {
						got.add(func() { got.credits[acct] += credit })
					}
				}
				if err != nil && (db.IsTransient(err) || errors.Is(err, context.Canceled)) {
					errs <- fmt.Errorf("%s: transient error (a deadlock?): %w", key, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("seed %d: %v", seed, err)
	}
	if _, err := r.Bill(ctx, 0); err != nil {
		t.Fatalf("seed %d: final bill: %v", seed, err)
	}

	// Every answer agrees with the final state.
	for key, amounts := range got.captures {
		acct, hold := splitKey(key)
		h := holdOf(t, pool, acct, hold)
		if h.Status != db.HoldCaptured || h.DecisionID != "" || got.voids[key] > 0 {
			t.Fatalf("seed %d: %s answered captured %v and voided %d times, is %+v", seed, key, amounts, got.voids[key], h)
		}
		for _, a := range amounts {
			if a != h.CapturedAmount {
				t.Fatalf("seed %d: %s answered captured %v, is %+v", seed, key, amounts, h)
			}
		}
	}
	for key := range got.voids {
		acct, hold := splitKey(key)
		if h := holdOf(t, pool, acct, hold); h.Status != db.HoldVoided {
			t.Fatalf("seed %d: %s answered voided, is %+v", seed, key, h)
		}
	}
	// The money: credits less API captures less billed decisions, per account. A decision naming a hold
	// that was captured through the API before the decision was billed (the capture's entry comes first
	// in the account's seq) pays only its cost beyond the captured amount: the hold is never paid twice.
	for i := range accounts {
		acct := account(i)
		var balance, want int64
		err := pool.QueryRow(ctx, `
			SELECT a.balance,
			       $2::bigint
			       - (SELECT coalesce(sum(captured_amount), 0) FROM holds WHERE account_id = a.id AND status = 'captured' AND decision_id IS NULL)
			       - (SELECT coalesce(sum(d.cost - CASE WHEN c.seq IS NOT NULL AND (e.seq IS NULL OR c.seq < e.seq)
			                                           THEN least(d.cost, h.captured_amount) ELSE 0 END), 0)
			          FROM decisions d
			          LEFT JOIN holds h ON h.account_id = d.account_id AND h.id = d.hold_id
			                           AND h.status = 'captured' AND h.decision_id IS NULL
			          LEFT JOIN ledger c ON c.account_id = d.account_id AND h.id IS NOT NULL
			                       AND c.dedupe_key = 'hold:' || d.account_id || ':' || d.hold_id
			          LEFT JOIN ledger e ON e.account_id = d.account_id AND e.dedupe_key = 'decision:' || d.id
			          WHERE d.account_id = a.id)
			FROM accounts a WHERE a.id = $1`, acct, got.credits[acct]).Scan(&balance, &want)
		if err != nil {
			t.Fatal(err)
		}
		if balance != want {
			t.Fatalf("seed %d: %s balance %d, want %d", seed, acct, balance, want)
		}
	}
	wantVerified(t, pool)
}

func splitKey(key string) (account, hold string) {
	for i := len(key) - 1; i >= 0; i-- {
		if key[i] == '/' {
			return key[:i], key[i+1:]
		}
	}
	return key, ""
}
