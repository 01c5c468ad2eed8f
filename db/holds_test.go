package db_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

type authorisation struct {
	hold   string
	amount int64
}

// A burst of authorisations of one account, grouped: each caller gets the answer its own
// AuthoriseHold would have given, in arrival order, and nothing more is reserved than was available.
func TestHoldAuthoriserGroupAnswersEachCallerAsItsOwnTransaction(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_hot", "usd", 100); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AuthoriseHold(ctx, pool, "acct_hot", db.HoldRequest{ID: "stored", Amount: 10, ExpiresIn: time.Hour}); err != nil {
		t.Fatal(err)
	}
	auths := []authorisation{
		{"stored", 10},  // a replay of a stored hold, answered before admission
		{"stored", 11},  // a conflict with it
		{"a", 50},       // admitted: 40 left
		{"a", 50},       // a replay of a, earlier in the group
		{"a", 5},        // a conflict with a
		{"too-big", 41}, // refused: claims nothing
		{"too-big", 40}, // admitted under the same id: 0 left
		{"late", 1},     // refused
	}
	// Staggered so that arrival order is the slice's order, all inside one window: 40 ms apart, so
	// that a goroutine woken late on a loaded machine still arrives after the one before it.
	const stagger = 40 * time.Millisecond
	authoriser := dbtest.Ledger(t, pool, db.LedgerConfig{Groups: db.GroupOptions{Window: time.Duration(len(auths)+2) * stagger}})
	outs := make([]db.HoldAuthorised, len(auths))
	errs := make([]error, len(auths))
	var wg sync.WaitGroup
	for i, a := range auths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * stagger)
			outs[i], errs[i] = authoriser.AuthoriseHoldGrouped(ctx, "acct_hot", db.HoldRequest{ID: a.hold, Amount: a.amount, ExpiresIn: time.Hour})
		}()
	}
	wg.Wait()

	want := []struct {
		created bool
		err     error
	}{{false, nil}, {false, db.ErrDedupeConflict}, {true, nil}, {false, nil}, {false, db.ErrDedupeConflict},
		{false, db.ErrInsufficientBalance}, {true, nil}, {false, db.ErrInsufficientBalance}}
	for i, w := range want {
		if outs[i].Created != w.created || !errors.Is(errs[i], w.err) || (w.err == nil && outs[i].Hold.ID != auths[i].hold) {
			t.Errorf("authorisation %d %+v: %+v, %v; want created=%t, %v", i, auths[i], outs[i], errs[i], w.created, w.err)
		}
	}
	acct, err := db.GetAccount(ctx, pool, "acct_hot")
	if err != nil {
		t.Fatal(err)
	}
	if acct.Held != 100 || acct.Available() != 0 {
		t.Fatalf("held %d available %d, want 100 and 0", acct.Held, acct.Available())
	}
	violations, err := db.Verify(ctx, pool, timeNow(), parkedAfter, parkedAfter)
	if err != nil || len(violations) > 0 {
		t.Fatalf("verify: %v %v", violations, err)
	}
}

// Authorisations of an account that does not exist are each answered so, grouped or not.
func TestHoldAuthoriserUnknownAccount(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	authoriser := dbtest.Ledger(t, pool, db.LedgerConfig{Groups: db.GroupOptions{Window: burstWindow}})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := authoriser.AuthoriseHoldGrouped(context.Background(), "acct_none", db.HoldRequest{ID: "h", Amount: 1, ExpiresIn: time.Minute}); !errors.Is(err, db.ErrAccountNotFound) {
				t.Errorf("authorise on a missing account: %v", err)
			}
		}()
	}
	wg.Wait()
}

// authoriseAllAtOnce authorises every authorisation from its own goroutine, released together, and
// returns each caller's answer in order.
func authoriseAllAtOnce(authoriser *db.Ledger, account string, auths []authorisation) ([]db.HoldAuthorised, []error) {
	outs := make([]db.HoldAuthorised, len(auths))
	errs := make([]error, len(auths))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, a := range auths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			outs[i], errs[i] = authoriser.AuthoriseHoldGrouped(context.Background(), account, db.HoldRequest{ID: a.hold, Amount: a.amount, ExpiresIn: time.Hour})
		}()
	}
	close(start)
	wg.Wait()
	return outs, errs
}

// 64 callers authorising the same id at once (a retry storm), and 64 retrying a hold stored before
// on an account with nothing left available: one hold reserved once, every other caller a replay of
// it, never a refusal (a stored id is answered before admission, however the balance moved).
func TestHoldAuthoriser64WayReplaysReserveOnce(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_storm", "usd", 100); err != nil {
		t.Fatal(err)
	}
	authoriser := dbtest.Ledger(t, pool, db.LedgerConfig{Groups: db.GroupOptions{Window: burstWindow}})
	for _, round := range []struct {
		hold    string
		amount  int64
		created int // callers answered Created
	}{
		{"storm", 60, 1}, // new: one caller reserves it
		{"storm", 60, 0}, // stored: 40 available, every caller a replay
		{"rest", 40, 1},  // takes the rest
		{"storm", 60, 0}, // stored, nothing available: still replays, not refusals
	} {
		auths := make([]authorisation, 64)
		for i := range auths {
			auths[i] = authorisation{round.hold, round.amount}
		}
		outs, errs := authoriseAllAtOnce(authoriser, "acct_storm", auths)
		created := 0
		for i := range auths {
			if errs[i] != nil || outs[i].Hold.ID != round.hold || outs[i].Hold.Amount != round.amount || outs[i].Hold.Status != db.HoldHeld {
				t.Fatalf("%+v caller %d: %+v, %v; want the hold", round, i, outs[i], errs[i])
			}
			if outs[i].Created {
				created++
			}
		}
		if created != round.created {
			t.Fatalf("%+v: %d callers created the hold, want %d", round, created, round.created)
		}
	}
	acct, err := db.GetAccount(ctx, pool, "acct_storm")
	if err != nil {
		t.Fatal(err)
	}
	if acct.Held != 100 {
		t.Fatalf("held %d, want 100 (60 + 40, each once)", acct.Held)
	}
	if got := count(t, pool, `SELECT count(*) FROM holds`); got != 2 {
		t.Fatalf("%d holds, want 2", got)
	}
	violations, err := db.Verify(ctx, pool, timeNow(), parkedAfter, parkedAfter)
	if err != nil || len(violations) > 0 {
		t.Fatalf("verify: %v %v", violations, err)
	}
}

// Members the database refuses (an id holds_id_format_check rejects, an amount
// holds_amount_positive_check rejects) fail the group's one insert; each member is then authorised in
// its own transaction, so only they fail and every other member is reserved.
func TestHoldAuthoriserMemberFailureFailsOnlyThatMember(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_member", "usd", 100); err != nil {
		t.Fatal(err)
	}
	auths := []authorisation{{"bad id!", 5}, {"negative", -5}}
	for i := range 8 {
		auths = append(auths, authorisation{fmt.Sprintf("ok-%d", i), 5})
	}
	outs, errs := authoriseAllAtOnce(dbtest.Ledger(t, pool, db.LedgerConfig{Groups: db.GroupOptions{Window: burstWindow}}), "acct_member", auths)
	for i := range 2 {
		if errs[i] == nil || errors.Is(errs[i], db.ErrTransient) {
			t.Fatalf("invalid authorisation %+v = %+v, %v; want its own error", auths[i], outs[i], errs[i])
		}
	}
	for i := 2; i < len(auths); i++ {
		if errs[i] != nil || !outs[i].Created {
			t.Fatalf("authorisation %+v = %+v, %v; want created despite the others", auths[i], outs[i], errs[i])
		}
	}
	acct, err := db.GetAccount(ctx, pool, "acct_member")
	if err != nil {
		t.Fatal(err)
	}
	if acct.Held != 40 {
		t.Fatalf("held %d, want 40", acct.Held)
	}
	if got := count(t, pool, `SELECT count(*) FROM holds`); got != 8 {
		t.Fatalf("%d holds, want 8", got)
	}
}

// The console's lists of holds: an account's holds still held, soonest to expire first, and every
// account's holds still held that expire within a window. Resolved holds and holds expiring later are
// left out.
func TestOpenHoldsAndHoldsExpiringWithin(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	for _, acct := range []string{"acct_x", "acct_y"} {
		if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, acct, "usd", 1000); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range []struct {
		account, id string
		ttl         time.Duration
	}{
		{"acct_x", "later", 2 * time.Hour},
		{"acct_x", "soon", 30 * time.Minute},
		{"acct_x", "voided", 10 * time.Minute},
		{"acct_y", "y_soon", 10 * time.Minute},
	} {
		if _, err := db.AuthoriseHold(ctx, pool, h.account, db.HoldRequest{ID: h.id, Amount: 10, ExpiresIn: h.ttl}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.VoidHold(ctx, pool, "acct_x", "voided"); err != nil {
		t.Fatal(err)
	}
	ids := func(holds []db.Hold) string {
		var out []string
		for _, h := range holds {
			out = append(out, h.AccountID+"/"+h.ID+"/"+h.Status)
		}
		return fmt.Sprint(out)
	}

	open, err := db.OpenHolds(ctx, pool, "acct_x", 10)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(open), "[acct_x/soon/held acct_x/later/held]"; got != want {
		t.Fatalf("open holds of acct_x: %s, want %s", got, want)
	}
	if open, err = db.OpenHolds(ctx, pool, "acct_x", 1); err != nil {
		t.Fatal(err)
	}
	if got, want := ids(open), "[acct_x/soon/held]"; got != want {
		t.Fatalf("open holds of acct_x, at most 1: %s, want %s", got, want)
	}

	expiring, err := db.HoldsExpiringWithin(ctx, pool, time.Hour, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(expiring), "[acct_y/y_soon/held acct_x/soon/held]"; got != want {
		t.Fatalf("holds expiring within an hour: %s, want %s", got, want)
	}
}

// verify reports a hold paid twice: a decision whose hold was captured through the API first, billed
// its whole cost anyway (posted here around billing's rule, as a broken biller would).
func TestVerifyFindsAHoldPaidTwice(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	ledger := dbtest.Ledger(t, pool)
	if _, err := ledger.CreateAccount(ctx, "acct_twice", "usd", 100); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AuthoriseHold(ctx, pool, "acct_twice", db.HoldRequest{ID: "h1", Amount: 60, ExpiresIn: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.CaptureHold(ctx, "acct_twice", "h1", 60); err != nil {
		t.Fatal(err)
	}
	if _, err := db.StoreDecisions(ctx, pool, []db.Decision{{ID: "d1", AccountID: "acct_twice", Cost: 60, OccurredAt: time.Now(), HoldID: "h1"}}); err != nil {
		t.Fatal(err)
	}
	verifyClean(t, pool)
	if _, err := post(t, pool, db.Posting{AccountID: "acct_twice", Kind: db.KindUsage, Amount: -60, DedupeKey: "decision:d1"}); err != nil {
		t.Fatal(err)
	}
	violations, err := db.Verify(ctx, pool, time.Now(), time.Hour, time.Hour)
	if err != nil || len(violations) != 1 || violations[0].Check != "paid_twice" {
		t.Fatalf("verify: %v %v, want the hold paid twice", violations, err)
	}
}
