package db_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

// A hold on a member reserves its own available first, then its team's, then its organisation's; a
// capture posts each level's part under its own key and releases every reservation, a replay posts none
// again, and a void and the expiry release exactly what was reserved (SPEC §18).
func TestHoldCascadeReservesCapturesAndReleasesEveryLevel(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	l := dbtest.Ledger(t, pool)
	createTree(t, l, [3]string{"org", "", "1000"}, [3]string{"team", "org", "300"}, [3]string{"member", "team", "40"})

	authorise := func(id string, amount int64) db.Hold {
		t.Helper()
		out, err := db.AuthoriseHold(ctx, pool, "member", db.HoldRequest{ID: id, Amount: amount, ExpiresIn: time.Hour})
		if err != nil {
			t.Fatalf("hold %s of %d: %v", id, amount, err)
		}
		return out.Hold
	}
	if h := authorise("h1", 100); h.Pooled != 60 {
		t.Fatalf("h1 pooled %d, want 60: 40 of the member's own, 60 of the team's", h.Pooled)
	}
	if h := authorise("h2", 400); h.Pooled != 400 {
		t.Fatalf("h2 pooled %d, want 400: 240 of the team's, 160 of the organisation's", h.Pooled)
	}
	wantHeld(t, pool, map[string]int64{"member": 40, "team": 300, "org": 160})
	wantReservations(t, pool, "h1:team:60 h2:org:160 h2:team:240")
	verifyClean(t, pool)

	// 840 is left in the whole tree: 900 does not fit, and nothing is written.
	if _, err := db.AuthoriseHold(ctx, pool, "member", db.HoldRequest{ID: "h3", Amount: 900, ExpiresIn: time.Hour}); !errors.Is(err, db.ErrInsufficientBalance) {
		t.Fatalf("a hold past the tree's available: %v, want insufficient balance", err)
	}
	wantHeld(t, pool, map[string]int64{"member": 40, "team": 300, "org": 160})

	// Capturing 70 of h1: the member's 40, then 30 of the team's 60; all of h1's reservations go.
	captured, err := l.CaptureHold(ctx, "member", "h1", 70)
	if err != nil {
		t.Fatal(err)
	}
	if got := partsOf(captured); got != "hold:member:h1 member -40 | hold:member:h1@team team -30 member" {
		t.Fatalf("capture posted %s", got)
	}
	wantHeld(t, pool, map[string]int64{"member": 0, "team": 240, "org": 160})
	wantBalances(t, pool, map[string]int64{"member": 0, "team": 270, "org": 1000})
	again, err := l.CaptureHold(ctx, "member", "h1", 70)
	if err != nil || again.Posted || again.Entry.ID != captured.Entry.ID {
		t.Fatalf("a replayed capture: %+v, %v; want the first capture's entry, nothing posted", again, err)
	}
	wantEntries(t, pool, 5) // the three grants and the capture's two parts
	verifyClean(t, pool)

	// A void releases h2 on the team and the organisation.
	if _, err := db.VoidHold(ctx, pool, "member", "h2"); err != nil {
		t.Fatal(err)
	}
	wantHeld(t, pool, map[string]int64{"member": 0, "team": 0, "org": 0})
	verifyClean(t, pool)

	// The expiry pass releases what an expired hold reserved on every level.
	authorise("h4", 500)
	wantHeld(t, pool, map[string]int64{"member": 0, "team": 270, "org": 230})
	if _, err := pool.Exec(ctx, `UPDATE holds SET created_at = now() - interval '2 hours', expires_at = now() - interval '1 hour' WHERE id = 'h4'`); err != nil {
		t.Fatal(err)
	}
	if out, err := db.ExpireHolds(ctx, pool); err != nil || out.Holds != 1 {
		t.Fatalf("expiry: %+v, %v", out, err)
	}
	wantHeld(t, pool, map[string]int64{"member": 0, "team": 0, "org": 0})
	verifyClean(t, pool)
}

// Billing a decision that captures a member's hold draws what the hold reserved on each level: the
// capture releases it in the same transaction, so the decision is paid by the pools that reserved for it,
// not left as the member's debt (SPEC §18).
func TestHoldCascadeBilledDecisionDrawsWhatItsHoldReserved(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	l := dbtest.Ledger(t, pool)
	createTree(t, l, [3]string{"org", "", "500"}, [3]string{"team", "org", "100"}, [3]string{"member", "team", "20"})
	if _, err := db.AuthoriseHold(ctx, pool, "member", db.HoldRequest{ID: "h1", Amount: 150, ExpiresIn: time.Hour}); err != nil {
		t.Fatal(err)
	}
	wantHeld(t, pool, map[string]int64{"member": 20, "team": 100, "org": 30})
	billed := billDecisions(t, pool, l, db.Decision{ID: "d1", AccountID: "member", Cost: 150, HoldID: "h1"})
	var got []string
	for _, e := range billed.Posted {
		got = append(got, fmt.Sprintf("%s %s %d", e.DedupeKey, e.AccountID, e.Amount))
	}
	if want := "decision:d1 member -20 | decision:d1@org org -30 | decision:d1@team team -100"; strings.Join(got, " | ") != want {
		t.Fatalf("billed %s, want %s", strings.Join(got, " | "), want)
	}
	wantHeld(t, pool, map[string]int64{"member": 0, "team": 0, "org": 0})
	wantBalances(t, pool, map[string]int64{"member": 0, "team": 0, "org": 470})
	verifyClean(t, pool)
}

// Holds and debits on a three-level tree from 64 goroutines, single and grouped authorisations, captures,
// voids and billing at once: no level ever reserves or pays more than it has, every capture's parts sum
// to what it captured, each once, and what the tree holds at the end is what its entries say (SPEC §18).
func TestHoldCascadeUnderConcurrentHoldsAndDebits(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	l := dbtest.Ledger(t, pool)
	createTree(t, l,
		[3]string{"org", "", "2000"}, [3]string{"team_a", "org", "300"}, [3]string{"team_b", "org", "100"},
		[3]string{"m1", "team_a", "50"}, [3]string{"m2", "team_a", "0"}, [3]string{"m3", "team_b", "30"}, [3]string{"m4", "org", "10"})
	members := []string{"m1", "m2", "m3", "m4", "team_a"}

	const workers = 64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 33))
			account := members[i%len(members)]
			id := fmt.Sprintf("h%02d", i)
			amount := int64(20 + rng.IntN(120))
			var err error
			if i%2 == 0 {
				_, err = l.AuthoriseHoldGrouped(ctx, account, db.HoldRequest{ID: id, Amount: amount, ExpiresIn: time.Hour})
			} else {
				_, err = db.AuthoriseHold(ctx, pool, account, db.HoldRequest{ID: id, Amount: amount, ExpiresIn: time.Hour})
			}
			if errors.Is(err, db.ErrInsufficientBalance) {
				err = nil // the tree ran out: refused, nothing written
			} else if err == nil {
				switch i % 4 {
				case 0, 1:
					_, err = l.CaptureHold(ctx, account, id, 1+rng.Int64N(amount))
				case 2:
					_, err = db.VoidHold(ctx, pool, account, id)
				case 3:
					_, err = db.StoreDecisions(ctx, pool, []db.Decision{{ID: "d" + id, AccountID: account, Cost: amount + 5, HoldID: id, OccurredAt: time.Now()}})
					if err == nil {
						err = billStored(ctx, pool, l)
					}
				}
			}
			if err != nil {
				errs <- fmt.Errorf("%s on %s: %w", id, account, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := billStored(ctx, pool, l); err != nil {
		t.Fatal(err)
	}

	// No pool's part of a capture or a decision ever took its pool below zero: a pool pays only from what
	// it has (or reserved).
	var overdrawn int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM ledger WHERE on_behalf_of IS NOT NULL AND balance_after < 0`).Scan(&overdrawn); err != nil || overdrawn != 0 {
		t.Fatalf("%d pool entries left their pool below zero (%v)", overdrawn, err)
	}
	// What was spent left the tree once: the grants less every usage entry is what the tree holds.
	var granted, used, balances int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(amount) FILTER (WHERE kind = 'grant'), 0), coalesce(-sum(amount) FILTER (WHERE kind = 'usage'), 0) FROM ledger`).Scan(&granted, &used); err != nil {
		t.Fatal(err)
	}
	var spent int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(captured_amount) FILTER (WHERE decision_id IS NULL), 0) FROM holds WHERE status = 'captured'`).Scan(&spent); err != nil {
		t.Fatal(err)
	}
	var billedCost int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(cost), 0) FROM decisions`).Scan(&billedCost); err != nil {
		t.Fatal(err)
	}
	if used != spent+billedCost {
		t.Fatalf("usage entries take %d, captures through the API %d and decisions %d: a unit attributed twice or not at all", used, spent, billedCost)
	}
	if err := pool.QueryRow(ctx, `SELECT sum(balance) FROM accounts`).Scan(&balances); err != nil || balances != granted-used {
		t.Fatalf("the tree holds %d (%v), its entries say %d", balances, err, granted-used)
	}
	var held int64
	if err := pool.QueryRow(ctx, `SELECT sum(held) FROM accounts`).Scan(&held); err != nil || held != 0 {
		t.Fatalf("%d still held (%v): every hold was resolved", held, err)
	}
	verifyClean(t, pool)
}

// billStored bills every decision stored so far.
func billStored(ctx context.Context, pool *pgxpool.Pool, l *db.Ledger) error {
	last, err := db.LastDecisionSeq(ctx, pool)
	if err != nil {
		return err
	}
	_, err = l.BillChunk(ctx, 0, last, 1000)
	return err
}

func partsOf(c db.HoldCapturedResult) string {
	var out []string
	for _, e := range append([]db.Entry{c.Entry}, c.Parts...) {
		out = append(out, strings.TrimSpace(fmt.Sprintf("%s %s %d %s", e.DedupeKey, e.AccountID, e.Amount, e.OnBehalfOf)))
	}
	return strings.Join(out, " | ")
}

func wantHeld(t *testing.T, pool *pgxpool.Pool, want map[string]int64) {
	t.Helper()
	for id, held := range want {
		a, err := db.GetAccount(context.Background(), pool, id)
		if err != nil || a.Held != held {
			t.Fatalf("%s holds %d (%v), want %d", id, a.Held, err, held)
		}
	}
}

func wantBalances(t *testing.T, pool *pgxpool.Pool, want map[string]int64) {
	t.Helper()
	for id, balance := range want {
		a, err := db.GetAccount(context.Background(), pool, id)
		if err != nil || a.Balance != balance {
			t.Fatalf("%s has %d (%v), want %d", id, a.Balance, err, balance)
		}
	}
}

func wantReservations(t *testing.T, pool *pgxpool.Pool, want string) {
	t.Helper()
	var got string
	err := pool.QueryRow(context.Background(),
		`SELECT coalesce(string_agg(hold_id || ':' || pool_id || ':' || amount, ' ' ORDER BY hold_id, pool_id), '') FROM hold_reservations`).Scan(&got)
	if err != nil || got != want {
		t.Fatalf("reservations %q (%v), want %q", got, err, want)
	}
}

func wantEntries(t *testing.T, pool *pgxpool.Pool, want int) {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM ledger`).Scan(&n); err != nil || n != want {
		t.Fatalf("%d entries (%v), want %d", n, err, want)
	}
}

// A member's part of 0 (its pools paid all of it) after a part it paid itself, in one billing statement,
// while its own lot still has credits that a hold reserves: the member's entry of 0 draws nothing from the
// lot it falls inside.
func TestCascadeMemberPartOfZeroDrawsNoLot(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	l := dbtest.Ledger(t, pool)
	createTree(t, l, [3]string{"org", "", "500"}, [3]string{"member", "org", "100"})
	if _, err := db.AuthoriseHold(ctx, pool, "member", db.HoldRequest{ID: "h1", Amount: 60, ExpiresIn: time.Hour}); err != nil {
		t.Fatal(err)
	}
	billed := billDecisions(t, pool, l,
		db.Decision{ID: "d1", AccountID: "member", Cost: 30},
		db.Decision{ID: "d2", AccountID: "member", Cost: 50},
		db.Decision{ID: "d3", AccountID: "member", Cost: 20})
	var got []string
	for _, e := range billed.Posted {
		got = append(got, fmt.Sprintf("%s %d", e.DedupeKey, e.Amount))
	}
	if want := "decision:d1 -30 | decision:d2 -10 | decision:d3 0 | decision:d2@org -40 | decision:d3@org -20"; strings.Join(got, " | ") != want {
		t.Fatalf("billed %s, want %s", strings.Join(got, " | "), want)
	}
	var draws int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM lot_draws d JOIN ledger e ON e.id = d.entry_id AND e.account_id = d.account_id
	                               WHERE e.dedupe_key = 'decision:d3'`).Scan(&draws); err != nil || draws != 0 {
		t.Fatalf("the member's 0 of d3 drew %d times (%v)", draws, err)
	}
	verifyClean(t, pool)
}

// 64 members of one organisation, none with credits of its own, authorising at once: their holds are
// grouped on the root's row (a few transactions, not 64), each member's answer is its own, and the
// organisation's available is never overdrawn: the authorisations past it are refused (SPEC §18).
func TestHoldCascadeHotPoolGroupedOnItsRoot(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	l := dbtest.Ledger(t, pool, db.LedgerConfig{Groups: db.GroupOptions{Window: burstWindow}})
	const members = 64
	accounts := [][3]string{{"org", "", "600"}}
	for i := range members {
		accounts = append(accounts, [3]string{fmt.Sprintf("m%02d", i), "org", "0"})
	}
	createTree(t, l, accounts...)
	errs := make([]error, members)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = l.AuthoriseHoldGrouped(ctx, fmt.Sprintf("m%02d", i), db.HoldRequest{ID: "h", Amount: 10, ExpiresIn: time.Hour})
		}()
	}
	close(start)
	wg.Wait()
	var created, refused int
	for i, err := range errs {
		switch {
		case err == nil:
			created++
		case errors.Is(err, db.ErrInsufficientBalance):
			refused++
		default:
			t.Errorf("m%02d: %v", i, err)
		}
	}
	if created != 60 || refused != 4 {
		t.Fatalf("%d created, %d refused; want 60 and 4: the organisation had 600 for holds of 10", created, refused)
	}
	wantHeld(t, pool, map[string]int64{"org": 600})
	var transactions int
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT xmin::text) FROM holds`).Scan(&transactions); err != nil {
		t.Fatal(err)
	}
	if transactions > members/4 {
		t.Fatalf("the %d holds were written by %d transactions: not grouped on the organisation", created, transactions)
	}
	verifyClean(t, pool)
}
