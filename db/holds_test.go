package db_test

import (
	"context"
	"errors"
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
	if _, err := ledger.CreateAccount(ctx, pool, "acct_hot", "usd", 100); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AuthoriseHold(ctx, pool, "acct_hot", "stored", 10, time.Hour); err != nil {
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
	authoriser := db.NewHoldAuthoriser(pool, db.PosterOptions{Window: burstWindow})
	outs := make([]db.HoldAuthorised, len(auths))
	errs := make([]error, len(auths))
	var wg sync.WaitGroup
	for i, a := range auths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Staggered so that arrival order is the slice's order, all inside one window.
			time.Sleep(time.Duration(i) * 5 * time.Millisecond)
			outs[i], errs[i] = authoriser.Authorise(ctx, "acct_hot", a.hold, a.amount, time.Hour)
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
	authoriser := db.NewHoldAuthoriser(pool, db.PosterOptions{Window: burstWindow})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := authoriser.Authorise(context.Background(), "acct_none", "h", 1, time.Minute); !errors.Is(err, db.ErrAccountNotFound) {
				t.Errorf("authorise on a missing account: %v", err)
			}
		}()
	}
	wg.Wait()
}
