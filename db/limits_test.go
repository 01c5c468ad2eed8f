package db_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

// limitedAccount creates an account with balance and the given limits.
func limitedAccount(t *testing.T, pool *pgxpool.Pool, account string, balance int64, limits map[string]db.LimitDefinition) {
	t.Helper()
	ctx := context.Background()
	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, account, "usd", balance); err != nil {
		t.Fatal(err)
	}
	for id, def := range limits {
		if err := db.PutLimit(ctx, pool, account, id, def); err != nil {
			t.Fatal(err)
		}
	}
}

// currentWindow returns the limit with its current window.
func currentWindow(t *testing.T, pool *pgxpool.Pool, account, limitID string) db.Limit {
	t.Helper()
	limits, err := db.Limits(context.Background(), pool, account)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range limits {
		if l.ID == limitID {
			return l
		}
	}
	t.Fatalf("no limit %s on %s", limitID, account)
	return db.Limit{}
}

var dailyCap = map[string]db.LimitDefinition{
	"daily": {Scope: db.ScopeAccount, Period: "day", Amount: 1000, Mode: db.LimitHard},
}

// 1,000 concurrent authorisations of 7 on one account under a hard cap of 1,000 a day, the balance
// ample, half of the granted ones captured at once: exactly ⌊1000 / 7⌋ = 142 are granted, the window
// holds and spends 994 between them, never one unit more, and every refusal names the limit. Directly
// (one transaction each) and through the group-committing authoriser.
func TestHardLimitHolds1000ConcurrentAuthorisations(t *testing.T) {
	t.Parallel()
	for _, grouped := range []bool{false, true} {
		t.Run(fmt.Sprintf("grouped=%t", grouped), func(t *testing.T) {
			t.Parallel()
			pool := dbtest.New(t)
			limitedAccount(t, pool, "acct_cap", 1_000_000, dailyCap)
			ledger := dbtest.Ledger(t, pool)
			ctx := context.Background()
			var granted, refused atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range 1000 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					req := db.HoldRequest{ID: fmt.Sprintf("h%d", i), Amount: 7, ExpiresIn: time.Hour}
					var err error
					if grouped {
						_, err = ledger.AuthoriseHoldGrouped(ctx, "acct_cap", req)
					} else {
						_, err = db.AuthoriseHold(ctx, pool, "acct_cap", req)
					}
					var limit *db.LimitExceededError
					switch {
					case err == nil:
						granted.Add(1)
						if i%2 == 0 {
							if _, err := ledger.CaptureHold(ctx, "acct_cap", req.ID, 0); err != nil {
								t.Errorf("capture %s: %v", req.ID, err)
							}
						}
					case errors.As(err, &limit) && limit.LimitID == "daily" && limit.Remaining < 7:
						refused.Add(1)
					default:
						t.Errorf("authorise %s: %v", req.ID, err)
					}
				}()
			}
			close(start)
			wg.Wait()
			if granted.Load() != 142 || refused.Load() != 858 {
				t.Fatalf("granted %d, refused %d; want 142 and 858", granted.Load(), refused.Load())
			}
			w := currentWindow(t, pool, "acct_cap", "daily")
			if w.Spent+w.Held != 994 || w.Remaining() != 6 || w.Over != 0 {
				t.Fatalf("window spent %d held %d over %d remaining %d; want 994 between spent and held, 6 left", w.Spent, w.Held, w.Over, w.Remaining())
			}
			var holds int64
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM holds WHERE account_id = 'acct_cap'`).Scan(&holds); err != nil || holds != 142 {
				t.Fatalf("%d holds stored (%v), want 142: a refusal keeps nothing", holds, err)
			}
			verifyClean(t, pool)
		})
	}
}

// A subject's limit never blocks another subject, a feature's never another feature; an account limit
// counts every subject.
func TestLimitScopesAreIsolated(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	limitedAccount(t, pool, "acct_scopes", 1_000_000, map[string]db.LimitDefinition{
		"alice":   {Scope: db.ScopeSubject, ScopeValue: "alice@example.com", Period: "month", Amount: 100, Mode: db.LimitHard},
		"search":  {Scope: db.ScopeFeature, ScopeValue: "search", Period: "week", Amount: 50, Mode: db.LimitHard},
		"overall": {Scope: db.ScopeAccount, Period: "day", Amount: 400, Mode: db.LimitHard},
	})
	auth := func(id, subject, feature string, amount int64) error {
		_, err := db.AuthoriseHold(ctx, pool, "acct_scopes", db.HoldRequest{ID: id, Amount: amount, ExpiresIn: time.Hour, Subject: subject, Feature: feature})
		return err
	}
	refusedBy := func(err error) string {
		var limit *db.LimitExceededError
		if errors.As(err, &limit) {
			return limit.LimitID
		}
		return fmt.Sprint(err)
	}
	if err := auth("a1", "alice@example.com", "", 100); err != nil {
		t.Fatal(err)
	}
	if got := refusedBy(auth("a2", "alice@example.com", "", 1)); got != "alice" {
		t.Fatalf("alice past her cap: refused by %q, want alice", got)
	}
	if err := auth("b1", "bob", "", 100); err != nil {
		t.Fatalf("bob is not alice: %v", err)
	}
	if err := auth("s1", "bob", "search", 50); err != nil {
		t.Fatal(err)
	}
	if got := refusedBy(auth("s2", "carol", "search", 1)); got != "search" {
		t.Fatalf("search past its cap: refused by %q, want search", got)
	}
	if err := auth("c1", "carol", "chat", 100); err != nil {
		t.Fatalf("chat is not search: %v", err)
	}
	// 350 of the account's 400 counted, whoever spent it.
	if got := refusedBy(auth("n1", "", "", 51)); got != "overall" {
		t.Fatalf("the account past its cap: refused by %q, want overall", got)
	}
	if err := auth("n2", "", "", 50); err != nil {
		t.Fatal(err)
	}
	for id, held := range map[string]int64{"alice": 100, "search": 50, "overall": 400} {
		if w := currentWindow(t, pool, "acct_scopes", id); w.Held != held || w.Spent != 0 {
			t.Errorf("limit %s: held %d spent %d, want held %d", id, w.Held, w.Spent, held)
		}
	}
	verifyClean(t, pool)
}

// The window rolls over on the database clock: a day's window full, backdated by a day, leaves
// today's empty; the hold counted yesterday is released from yesterday's window, whatever today's.
// Void, expiry and a partial capture free exactly what they should, and a replayed authorisation
// moves no window twice.
func TestLimitWindowsRollOverAndResolve(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	limitedAccount(t, pool, "acct_roll", 1_000_000, dailyCap)
	ledger := dbtest.Ledger(t, pool)
	auth := func(id string, amount int64) error {
		_, err := db.AuthoriseHold(ctx, pool, "acct_roll", db.HoldRequest{ID: id, Amount: amount, ExpiresIn: time.Hour})
		return err
	}
	window := func() (spent, held int64) {
		w := currentWindow(t, pool, "acct_roll", "daily")
		return w.Spent, w.Held
	}
	if err := auth("old", 1000); err != nil {
		t.Fatal(err)
	}
	if err := auth("old", 1000); err != nil { // a replay
		t.Fatal(err)
	}
	if spent, held := window(); spent != 0 || held != 1000 {
		t.Fatalf("after a replay: spent %d held %d, want 0 and 1000", spent, held)
	}
	if err := auth("more", 1); !errors.Is(err, db.ErrLimitExceeded) {
		t.Fatalf("a full window: %v, want limit exceeded", err)
	}
	// Yesterday, as far as the window and the hold know (a value read first: a cluster computes no time
	// from a row's own column in an UPDATE).
	var yesterday time.Time
	if err := pool.QueryRow(ctx, `SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '1 day'`).Scan(&yesterday); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE spend_windows SET window_start = $1 WHERE account_id = 'acct_roll'`, yesterday); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE holds SET window_starts = ARRAY[$1::timestamptz] WHERE account_id = 'acct_roll' AND id = 'old'`, yesterday); err != nil {
		t.Fatal(err)
	}
	if spent, held := window(); spent != 0 || held != 0 {
		t.Fatalf("today's window: spent %d held %d, want nothing", spent, held)
	}
	if err := auth("today", 600); err != nil {
		t.Fatalf("today's window is empty: %v", err)
	}
	// A partial capture: 200 spent, 400 released.
	if _, err := ledger.CaptureHold(ctx, "acct_roll", "today", 200); err != nil {
		t.Fatal(err)
	}
	if spent, held := window(); spent != 200 || held != 0 {
		t.Fatalf("after capturing 200 of 600: spent %d held %d, want 200 and 0", spent, held)
	}
	// Yesterday's hold voided: released from yesterday's window, today's untouched.
	if _, err := db.VoidHold(ctx, pool, "acct_roll", "old"); err != nil {
		t.Fatal(err)
	}
	var yesterdayHeld int64
	err := pool.QueryRow(ctx, `SELECT held FROM spend_windows WHERE account_id = 'acct_roll' AND window_start < date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'`).Scan(&yesterdayHeld)
	if err != nil || yesterdayHeld != 0 {
		t.Fatalf("yesterday's window after the void: held %d (%v), want 0", yesterdayHeld, err)
	}
	if spent, held := window(); spent != 200 || held != 0 {
		t.Fatalf("today's window after yesterday's void: spent %d held %d, want 200 and 0", spent, held)
	}
	// Expiry releases: a hold past its time (backdated), expired by the pass.
	if err := auth("expiring", 800); err != nil {
		t.Fatal(err)
	}
	if err := auth("over", 1); !errors.Is(err, db.ErrLimitExceeded) {
		t.Fatalf("today's window full again: %v, want limit exceeded", err)
	}
	// Its time up a millisecond after it was authorised (read first, for the cluster).
	var created time.Time
	if err := pool.QueryRow(ctx, `SELECT created_at FROM holds WHERE account_id = 'acct_roll' AND id = 'expiring'`).Scan(&created); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE holds SET expires_at = $1 WHERE account_id = 'acct_roll' AND id = 'expiring'`, created.Add(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExpireHolds(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if spent, held := window(); spent != 200 || held != 0 {
		t.Fatalf("after the expiry: spent %d held %d, want 200 and 0", spent, held)
	}
	if err := auth("after", 800); err != nil {
		t.Fatalf("the expiry freed 800: %v", err)
	}
	verifyClean(t, pool)
}

// A decision billed without a hold is billed in full even beyond a hard cap, its overshoot counted in
// over; a decision capturing its hold spends its hold's capture in the hold's window and its cost
// beyond it as a decision; re-billing counts nothing twice.
func TestLimitBillingCountsDecisionsAndOvershoot(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	limitedAccount(t, pool, "acct_bill", 1_000_000, map[string]db.LimitDefinition{
		"daily":      {Scope: db.ScopeAccount, Period: "day", Amount: 100, Mode: db.LimitHard},
		"agent":      {Scope: db.ScopeSubject, ScopeValue: "agent-7", Period: "month", Amount: 1000, Mode: db.LimitSoft},
		"chat":       {Scope: db.ScopeFeature, ScopeValue: "chat", Period: "week", Amount: 20, Mode: db.LimitSoft},
		"chat-daily": {Scope: db.ScopeFeature, ScopeValue: "chat", Period: "day", Amount: 10, Mode: db.LimitHard},
	})
	ledger := dbtest.Ledger(t, pool)
	if _, err := db.AuthoriseHold(ctx, pool, "acct_bill", db.HoldRequest{ID: "h1", Amount: 30, ExpiresIn: time.Hour, Subject: "agent-7"}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	decisions := []db.Decision{
		{ID: "d1", AccountID: "acct_bill", Cost: 50, OccurredAt: now, HoldID: "h1", Subject: "agent-7"}, // 30 captured + 20 beyond
		{ID: "d2", AccountID: "acct_bill", Cost: 60, OccurredAt: now, Subject: "agent-7"},               // 10 over the cap
		{ID: "d3", AccountID: "acct_bill", Cost: 25, OccurredAt: now, Feature: "chat"},                  // all over
	}
	if _, err := db.StoreDecisions(ctx, pool, decisions); err != nil {
		t.Fatal(err)
	}
	last, err := db.LastDecisionSeq(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second pass is a re-read: nothing posted, nothing counted
		if _, err := ledger.BillChunk(ctx, 0, last, 100); err != nil {
			t.Fatal(err)
		}
	}
	daily := currentWindow(t, pool, "acct_bill", "daily")
	if daily.Spent != 135 || daily.Held != 0 || daily.Over != 35 || daily.Remaining() != 0 {
		t.Fatalf("daily: spent %d held %d over %d, want 135, 0, 35", daily.Spent, daily.Held, daily.Over)
	}
	// Windows nothing counted in before billing: opened by it, with what it counted.
	chat := currentWindow(t, pool, "acct_bill", "chat")
	chatDaily := currentWindow(t, pool, "acct_bill", "chat-daily")
	if chat.Spent != 25 || chat.Over != 0 || chatDaily.Spent != 25 || chatDaily.Over != 15 {
		t.Fatalf("chat: spent %d over %d, want 25 and 0; chat-daily: spent %d over %d, want 25 and 15", chat.Spent, chat.Over, chatDaily.Spent, chatDaily.Over)
	}
	if reached := takeReached(t, pool); len(reached) != 1 || reached[0].LimitID != "chat" {
		t.Fatalf("limit.reached for %+v, want chat only", reached)
	}
	agent := currentWindow(t, pool, "acct_bill", "agent")
	if agent.Spent != 110 || agent.Held != 0 || agent.Over != 0 {
		t.Fatalf("agent: spent %d held %d over %d, want 110, 0, 0", agent.Spent, agent.Held, agent.Over)
	}
	acct, err := db.GetAccount(ctx, pool, "acct_bill")
	if err != nil || acct.Balance != 1_000_000-135 {
		t.Fatalf("balance %d (%v): every decision is billed in full", acct.Balance, err)
	}
	verifyClean(t, pool)
}

// A soft limit refuses nothing; crossing its cap records limit.reached once per window.
func TestSoftLimitReachedOncePerWindow(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	limitedAccount(t, pool, "acct_soft", 1_000_000, map[string]db.LimitDefinition{
		"warn": {Scope: db.ScopeAccount, Period: "month", Amount: 100, Mode: db.LimitSoft},
	})
	for i := range 5 {
		if _, err := db.AuthoriseHold(ctx, pool, "acct_soft", db.HoldRequest{ID: fmt.Sprint("h", i), Amount: 40, ExpiresIn: time.Hour}); err != nil {
			t.Fatalf("a soft limit refuses nothing: %v", err)
		}
	}
	if got := takeReached(t, pool); len(got) != 1 || got[0].LimitID != "warn" || got[0].Held != 200 {
		t.Fatalf("limit.reached: %+v, want one for warn", got)
	}
	if got := takeReached(t, pool); len(got) != 0 {
		t.Fatalf("limit.reached taken twice: %+v", got)
	}
	if w := currentWindow(t, pool, "acct_soft", "warn"); w.Held != 200 || w.Remaining() != 0 {
		t.Fatalf("soft window: held %d remaining %d, want 200 and 0", w.Held, w.Remaining())
	}
}

// takeReached takes the windows whose limit.reached is still to enqueue, as the sweeper does.
func takeReached(t *testing.T, pool *pgxpool.Pool) []db.LimitReached {
	t.Helper()
	var out []db.LimitReached
	err := db.InTx(context.Background(), pool, func(tx db.Tx) (err error) {
		out, err = db.TakeLimitsReached(context.Background(), tx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Each verify check of the windows reports a window tampered with.
func TestVerifyReportsTamperedWindows(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		check, tamper string
	}{
		{"window_held", `UPDATE spend_windows SET held = held + 1`},
		{"window_spent", `UPDATE spend_windows SET spent = spent + 1`},
	} {
		t.Run(tc.check, func(t *testing.T) {
			t.Parallel()
			pool := dbtest.New(t)
			ctx := context.Background()
			limitedAccount(t, pool, "acct_tamper", 1000, dailyCap)
			if _, err := db.AuthoriseHold(ctx, pool, "acct_tamper", db.HoldRequest{ID: "h", Amount: 10, ExpiresIn: time.Hour}); err != nil {
				t.Fatal(err)
			}
			// Defined since before the window, so that its spent is recounted.
			if _, err := pool.Exec(ctx, `UPDATE spend_limits SET defined_at = $1`, time.Now().AddDate(0, -2, 0)); err != nil {
				t.Fatal(err)
			}
			verifyClean(t, pool)
			if _, err := pool.Exec(ctx, tc.tamper); err != nil {
				t.Fatal(err)
			}
			violations, err := db.Verify(ctx, pool, timeNow(), parkedAfter, parkedAfter)
			if err != nil {
				t.Fatal(err)
			}
			if len(violations) != 1 || violations[0].Check != tc.check {
				t.Fatalf("violations %v, want one %s", violations, tc.check)
			}
		})
	}
}
