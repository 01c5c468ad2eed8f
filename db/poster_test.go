package db_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

// postAllAtOnce posts every posting from its own goroutine, released together, and returns each
// caller's answer in the order of postings.
func postAllAtOnce(poster *db.Ledger, postings []db.Posting) ([]db.Posted, []error) {
	ctxs := make([]context.Context, len(postings))
	for i := range ctxs {
		ctxs[i] = context.Background()
	}
	return postEachAtOnce(poster, postings, ctxs)
}

// postAllAtOnceAudited is postAllAtOnce for requests that carry their pending audit records
// (requestBy), returned in the order of postings.
func postAllAtOnceAudited(poster *db.Ledger, postings []db.Posting) ([]db.Posted, []error, []*db.PendingAudit) {
	ctxs := make([]context.Context, len(postings))
	pending := make([]*db.PendingAudit, len(postings))
	for i, p := range postings {
		ctxs[i], pending[i] = requestBy("ops", p.AccountID)
	}
	outs, errs := postEachAtOnce(poster, postings, ctxs)
	return outs, errs, pending
}

// postEachAtOnce posts postings[i] in ctxs[i], each from its own goroutine, released together.
func postEachAtOnce(poster *db.Ledger, postings []db.Posting, ctxs []context.Context) ([]db.Posted, []error) {
	outs := make([]db.Posted, len(postings))
	errs := make([]error, len(postings))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, p := range postings {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			outs[i], errs[i] = poster.PostGrouped(ctxs[i], p)
		}()
	}
	close(start)
	wg.Wait()
	return outs, errs
}

// fundedAccount creates account holding amount, topped up once.
func fundedAccount(t *testing.T, pool *db.Pool, account string, amount int64) {
	t.Helper()
	createAccount(t, pool, account)
	if _, err := post(t, pool, db.Posting{AccountID: account, Kind: db.KindTopup, Amount: amount, DedupeKey: "stripe:evt_fund_" + account}); err != nil {
		t.Fatal(err)
	}
}

// transactions counts the transactions that committed account's entries keyed api:{account}:{name}…:
// entries of one transaction share its xmin.
func transactions(t *testing.T, pool *db.Pool, account, name string) int {
	t.Helper()
	return count(t, pool, `SELECT count(DISTINCT xmin::text) FROM ledger WHERE dedupe_key LIKE $1`, "api:"+account+":"+name+"%")
}

func adjustment(account, key string, amount int64) db.Posting {
	return db.Posting{AccountID: account, Kind: db.KindAdjustment, Amount: amount, Description: "bench", DedupeKey: key, NoOverdraw: true}
}

// A wide window puts the whole burst in one or a few groups, which is what is under test.
const burstWindow = 200 * time.Millisecond

func TestPosterGroupAnswersEachCallerAsItsOwnTransaction(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	const acct = "acct_hot"
	fundedAccount(t, pool, acct, 1000)
	prior, err := post(t, pool, adjustment(acct, "api:acct_hot:prior", 50))
	if err != nil {
		t.Fatal(err)
	}

	var postings []db.Posting
	for i := range 40 { // unique keys: all posted
		postings = append(postings, adjustment(acct, fmt.Sprintf("api:acct_hot:u%d", i), 10))
	}
	for range 8 { // one key eight times: one posted, seven replays of it
		postings = append(postings, adjustment(acct, "api:acct_hot:repeat", 7))
	}
	postings = append(postings,
		adjustment(acct, "api:acct_hot:prior", 50), // replay of an entry posted before the burst
		adjustment(acct, "api:acct_hot:prior", 51), // conflict with it
		adjustment(acct, "api:acct_hot:split", 3),  // these two: one posted, the other a conflict
		adjustment(acct, "api:acct_hot:split", 4),
		adjustment(acct, "api:acct_hot:overdraw", -1_000_000), // refused, never fails the others
	)
	for len(postings) < 64 { // unkeyed usage, which may take the balance negative
		postings = append(postings, db.Posting{AccountID: acct, Kind: db.KindUsage, Amount: -2, Description: "usage"})
	}

	before := count(t, pool, `SELECT count(*) FROM ledger`)
	outs, errs := postAllAtOnce(dbtest.Ledger(t, pool, db.LedgerConfig{Groups: db.GroupOptions{Window: burstWindow}}), postings)

	var want int64 = 1050 // seed topup + prior
	posted := 0
	byKey := map[string]int64{}
	for i := range 40 {
		if errs[i] != nil || !outs[i].New || outs[i].Entry.ID == 0 || outs[i].Entry.BalanceAfter == 0 {
			t.Fatalf("unique posting %d = %+v, %v; want posted", i, outs[i], errs[i])
		}
		want += 10
		posted++
	}
	var repeatID int64
	repeatPosted := 0
	for i := 40; i < 48; i++ {
		if errs[i] != nil {
			t.Fatalf("repeated key, caller %d: %v", i, errs[i])
		}
		if outs[i].New {
			repeatPosted++
			repeatID = outs[i].Entry.ID
		}
	}
	if repeatPosted != 1 {
		t.Fatalf("repeated key posted %d times, want once", repeatPosted)
	}
	for i := 40; i < 48; i++ {
		if outs[i].Entry.ID != repeatID {
			t.Fatalf("repeated key, caller %d got entry %d, want the one entry %d", i, outs[i].Entry.ID, repeatID)
		}
	}
	want += 7
	posted++

	if o, err := outs[48], errs[48]; err != nil || o.New || o.Entry.ID != prior.Entry.ID {
		t.Fatalf("replay of the prior key = %+v, %v; want posted=false with entry %d", o, err, prior.Entry.ID)
	}
	if o, err := outs[49], errs[49]; !errors.Is(err, db.ErrDedupeConflict) || o.Entry.ID != prior.Entry.ID {
		t.Fatalf("conflict on the prior key = %+v, %v; want ErrDedupeConflict naming entry %d", o, err, prior.Entry.ID)
	}
	split := [2]error{errs[50], errs[51]}
	switch {
	case split[0] == nil && errors.Is(split[1], db.ErrDedupeConflict) && outs[50].New:
		want += 3
		byKey["api:acct_hot:split"] = 3
	case split[1] == nil && errors.Is(split[0], db.ErrDedupeConflict) && outs[51].New:
		want += 4
		byKey["api:acct_hot:split"] = 4
	default:
		t.Fatalf("same key, two amounts: %+v %v / %+v %v; want one posted and one ErrDedupeConflict", outs[50], errs[50], outs[51], errs[51])
	}
	posted++
	if !errors.Is(errs[52], db.ErrInsufficientBalance) || outs[52].New {
		t.Fatalf("overdraw = %+v, %v; want ErrInsufficientBalance", outs[52], errs[52])
	}
	for i := 53; i < 64; i++ {
		if errs[i] != nil || !outs[i].New {
			t.Fatalf("usage %d = %+v, %v; want posted", i, outs[i], errs[i])
		}
		want -= 2
		posted++
	}

	if got := balance(t, pool, acct); got != want {
		t.Fatalf("balance = %d, want %d", got, want)
	}
	if got := count(t, pool, `SELECT count(*) FROM ledger`) - before; got != posted {
		t.Fatalf("burst added %d entries, want %d", got, posted)
	}
	if got := count(t, pool, `SELECT count(*) FROM ledger WHERE dedupe_key = 'api:acct_hot:overdraw'`); got != 0 {
		t.Fatalf("the refused overdraw left %d entries", got)
	}
	if got := count(t, pool, `SELECT amount FROM ledger WHERE dedupe_key = 'api:acct_hot:split'`); int64(got) != byKey["api:acct_hot:split"] {
		t.Fatalf("split key holds %d, the caller told posted holds %d", got, byKey["api:acct_hot:split"])
	}
	if got := count(t, pool, `SELECT count(*) FROM accounts a WHERE a.balance <> (SELECT sum(amount) FROM ledger l WHERE l.account_id = a.id)`); got != 0 {
		t.Fatalf("%d accounts whose cached balance is not the sum of their entries", got)
	}
	// Each caller's balance is the one its own entry left: in entry order, the previous plus its amount.
	var mine []db.Posted
	for _, o := range outs {
		if o.New {
			mine = append(mine, o)
		}
	}
	slices.SortFunc(mine, func(a, b db.Posted) int { return cmp.Compare(a.Entry.ID, b.Entry.ID) })
	running := int64(1050)
	for _, o := range mine {
		running += o.Entry.Amount
		if o.Entry.BalanceAfter != running {
			t.Fatalf("entry %d's caller saw balance %d, want %d", o.Entry.ID, o.Entry.BalanceAfter, running)
		}
	}
	// Entries of one transaction share its xmin: the burst must have committed in a few groups.
	groups := count(t, pool, `SELECT count(DISTINCT xmin::text) FROM ledger WHERE id > $1`, prior.Entry.ID)
	t.Logf("the burst committed in %d transactions", groups)
	if groups > 8 {
		t.Fatalf("the burst committed in %d transactions; group commit should need a few", groups)
	}
}

func TestPosterTransientGroupFailureFailsEveryMemberAndPostsNothing(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	const acct = "acct_transient"
	createAccount(t, pool, acct)
	// The failure strikes once the group has inserted its entries and moved the balance.
	var largest atomic.Int64
	failing := db.LedgerConfig{OnPosted: func(_ context.Context, _ pgx.Tx, posted []db.Entry) error {
		largest.Store(max(largest.Load(), int64(len(posted))))
		return fmt.Errorf("%w: connection lost", db.ErrTransient)
	}}
	var postings []db.Posting
	for i := range 16 {
		postings = append(postings, adjustment(acct, fmt.Sprintf("api:%s:%d", acct, i), 5))
	}
	outs, errs := postAllAtOnce(dbtest.Ledger(t, pool, withGroups(failing, db.GroupOptions{Window: burstWindow})), postings)
	for i, err := range errs {
		if !errors.Is(err, db.ErrTransient) || outs[i].New {
			t.Fatalf("caller %d = %+v, %v; want the transient error", i, outs[i], err)
		}
	}
	if largest.Load() < 2 {
		t.Fatalf("the postings never met in a group (largest %d)", largest.Load())
	}
	if got := balance(t, pool, acct); got != 0 {
		t.Fatalf("balance = %d after a failed group, want 0", got)
	}
	if got := count(t, pool, `SELECT count(*) FROM ledger WHERE account_id = $1`, acct); got != 0 {
		t.Fatalf("a failed group left %d entries", got)
	}
}

func TestPosterMemberFailureFailsOnlyThatMember(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	const acct = "acct_member_fails"
	createAccount(t, pool, acct)
	poison := "api:" + acct + ":poison"
	refusing := db.LedgerConfig{OnPosted: func(_ context.Context, _ pgx.Tx, posted []db.Entry) error {
		for _, p := range posted {
			if p.DedupeKey == poison {
				return errors.New("notification refused")
			}
		}
		return nil
	}}
	postings := []db.Posting{
		adjustment(acct, poison, 5),
		{AccountID: acct, Kind: db.KindTopup, Amount: -5, DedupeKey: "stripe:evt_negative"}, // ledger_kind_sign_check
		{AccountID: "acct_missing", Kind: db.KindAdjustment, Amount: 5, DedupeKey: "api:acct_missing:1"},
	}
	for i := range 8 {
		postings = append(postings, adjustment(acct, fmt.Sprintf("api:%s:%d", acct, i), 5))
	}
	outs, errs := postAllAtOnce(dbtest.Ledger(t, pool, withGroups(refusing, db.GroupOptions{Window: burstWindow})), postings)
	if errs[0] == nil || errors.Is(errs[0], db.ErrTransient) {
		t.Fatalf("poisoned posting = %v; want its OnPosted error", errs[0])
	}
	if !errors.Is(errs[1], db.ErrInvalidAmount) {
		t.Fatalf("negative top-up = %v; want ErrInvalidAmount", errs[1])
	}
	if !errors.Is(errs[2], db.ErrAccountNotFound) {
		t.Fatalf("posting on a missing account = %v; want ErrAccountNotFound", errs[2])
	}
	for i := 3; i < len(postings); i++ {
		if errs[i] != nil || !outs[i].New {
			t.Fatalf("caller %d = %+v, %v; want posted despite the others", i, outs[i], errs[i])
		}
	}
	if got := balance(t, pool, acct); got != 40 {
		t.Fatalf("balance = %d, want 40", got)
	}
	if got := count(t, pool, `SELECT count(*) FROM ledger`); got != 8 {
		t.Fatalf("ledger holds %d entries, want 8", got)
	}
}

func TestPosterCallerThatLeavesBeforeItsGroupPostsNothing(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	const acct = "acct_leaves"
	createAccount(t, pool, acct)
	poster := dbtest.Ledger(t, pool, db.LedgerConfig{Groups: db.GroupOptions{Window: burstWindow}})
	ctx, cancel := context.WithTimeout(context.Background(), burstWindow/4)
	defer cancel()
	if _, err := poster.PostGrouped(ctx, adjustment(acct, "api:acct_leaves:1", 5)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("post after the caller's deadline = %v, want context.DeadlineExceeded", err)
	}
	// The next posting's group runs after the withdrawn one was due: only it is posted.
	if out, err := poster.PostGrouped(context.Background(), adjustment(acct, "api:acct_leaves:2", 7)); err != nil || !out.New || out.Entry.BalanceAfter != 7 {
		t.Fatalf("next post = %+v, %v; want posted with balance 7", out, err)
	}
	if got := count(t, pool, `SELECT count(*) FROM ledger WHERE account_id = $1`, acct); got != 1 {
		t.Fatalf("ledger holds %d entries, want only the second posting", got)
	}
}

// TestGroupBalanceUpdateHoldsNoOverdrawInSQL: the group's one insert refuses, in SQL, a plan
// whose running balance would go below zero after a no-overdraw entry — even when the group's total
// is positive — so a planner bug fails the group instead of overdrawing. Entries without the rule
// (usage, reversals) may still take the balance below zero.
func TestGroupBalanceUpdateHoldsNoOverdrawInSQL(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	const acct = "acct_sql_rule"
	fundedAccount(t, pool, acct, 100)
	update := func(postings ...db.Posting) error {
		return db.InTx(context.Background(), pool, func(tx pgx.Tx) error {
			return db.InsertGroupAsAdmitted(context.Background(), ledger, tx, postings)
		})
	}
	debit := func(amount int64) db.Posting { return adjustment(acct, "", amount) }
	usage := db.Posting{AccountID: acct, Kind: db.KindUsage, Amount: -150}

	for name, postings := range map[string][]db.Posting{
		"two debits that each fit alone":         {debit(-60), debit(-60)},
		"a debit covered only by a later credit": {debit(-150), debit(200)},
		"a debit after usage took it below zero": {usage, debit(-1)},
	} {
		if err := update(postings...); err == nil {
			t.Fatalf("%s: the group's balance update accepted an overdraw", name)
		}
		if b := balance(t, pool, acct); b != 100 {
			t.Fatalf("%s: balance %d after a refused group, want 100", name, b)
		}
	}
	if err := update(debit(-100), usage, debit(150)); err != nil {
		t.Fatalf("usage below zero is allowed: %v", err)
	}
	if b := balance(t, pool, acct); b != 0 {
		t.Fatalf("balance %d, want 0", b)
	}
}

// TestPosterGroupSumsAreChecked: credits gathered near the top of a bigint are refused with
// ErrOutOfRange once their sum would not fit — never ErrInsufficientBalance from a wrapped sum — and
// the members that fit still post, exactly as their own transactions would.
func TestPosterGroupSumsAreChecked(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	const acct = "acct_near_max"
	createAccount(t, pool, acct)
	const start = math.MaxInt64 - 25
	if _, err := post(t, pool, db.Posting{AccountID: acct, Kind: db.KindTopup, Amount: start, DedupeKey: "stripe:evt_huge"}); err != nil {
		t.Fatal(err)
	}
	var postings []db.Posting
	for i := range 10 {
		postings = append(postings, adjustment(acct, fmt.Sprintf("api:acct_near_max:c%d", i), 10))
	}
	outs, errs := postAllAtOnce(dbtest.Ledger(t, pool, db.LedgerConfig{Groups: db.GroupOptions{Window: burstWindow}}), postings)
	var posted, refused int64
	for i, err := range errs {
		switch {
		case err == nil && outs[i].New:
			posted++
		case errors.Is(err, db.ErrOutOfRange):
			refused++
		default:
			t.Fatalf("credit %d near the limit = %+v, %v; want posted or ErrOutOfRange", i, outs[i], err)
		}
	}
	if posted != 2 || refused != 8 {
		t.Fatalf("%d posted and %d refused, want 2 and 8", posted, refused)
	}
	if b := balance(t, pool, acct); b != start+20 {
		t.Fatalf("balance %d, want %d", b, int64(start+20))
	}
	// Alone, the statement's own overflow is the same answer.
	if _, err := post(t, pool, adjustment(acct, "api:acct_near_max:alone", 10)); !errors.Is(err, db.ErrOutOfRange) {
		t.Fatalf("a lone credit beyond a bigint = %v, want ErrOutOfRange", err)
	}
}

// A group planned on the balance the account's previous group left inserts only if the locked balance
// is still that one (LedgerInsertGroup's start_balance); otherwise it is planned again on the locked
// row, in the same transaction, and answers as if it had been planned there from the start.
func TestPosterGroupPlannedOnTheLastBalance(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	const acct = "acct_hot"
	fundedAccount(t, pool, acct, 1000)
	poster := dbtest.Ledger(t, pool, db.LedgerConfig{Groups: db.GroupOptions{}})
	ctx := context.Background()
	credits := func(name string, n int, amount int64) []db.Posting {
		var ps []db.Posting
		for i := range n {
			ps = append(ps, adjustment(acct, fmt.Sprintf("api:%s:%s%d", acct, name, i), amount))
		}
		return ps
	}
	// check runs postings as a group planned on plannedOn and wants every one posted, chained from the
	// balance the account really had, in one transaction.
	check := func(name string, plannedOn int64, postings []db.Posting) {
		t.Helper()
		start := balance(t, pool, acct)
		outs, errs, left, err := db.PostGroupPlannedOn(ctx, poster, postings, plannedOn)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		running := start
		for i, o := range outs {
			running += postings[i].Amount
			if errs[i] != nil || !o.New || o.Entry.BalanceAfter != running {
				t.Fatalf("%s: member %d = %+v, %v; want posted leaving %d", name, i, o, errs[i], running)
			}
		}
		if left != running || balance(t, pool, acct) != running {
			t.Fatalf("%s: the group left %d, the account holds %d; want %d", name, left, balance(t, pool, acct), running)
		}
		if n := transactions(t, pool, acct, name); n != 1 {
			t.Fatalf("%s: the group committed in %d transactions, want one", name, n)
		}
	}

	check("same", 1000, credits("same", 3, 10))
	// Another path credited the account since: the premise is wrong, the group is planned again.
	check("below", 900, credits("below", 3, 10))
	check("above", 5000, credits("above", 3, 10))

	// Planned on 2000, three debits of 500 all fit; on the real 1090 only two do. The third is
	// refused, as its own transaction would refuse it, and the other two commit together.
	debits := credits("debit", 3, -500)
	outs, errs, left, err := db.PostGroupPlannedOn(ctx, poster, debits, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], db.ErrInsufficientBalance) || outs[2].New {
		t.Fatalf("debits planned on a higher balance = %v; want two posted and the third ErrInsufficientBalance", errs)
	}
	if left != 90 || balance(t, pool, acct) != 90 {
		t.Fatalf("after the debits the group left %d, the account holds %d; want 90", left, balance(t, pool, acct))
	}

	// A missing account is found by the lock, as without a planned balance: each member posts alone.
	if _, _, _, err := db.PostGroupPlannedOn(ctx, poster, []db.Posting{adjustment("acct_none", "k1", 1), adjustment("acct_none", "k2", 1)}, 0); !errors.Is(err, db.ErrPostAlone) {
		t.Fatalf("a group of a missing account = %v, want it posted member by member", err)
	}
}

// A group planned on the account's balance may have to wait for another transaction's lock on the row:
// LedgerInsertGroup then checks the balance again on the row that transaction left. Moved, the group is
// planned again on it; unmoved, the group inserts as planned. Either way in one transaction of its own.
func TestPosterGroupPlannedOnABalanceMovedWhileItWaits(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	const acct = "acct_hot"
	fundedAccount(t, pool, acct, 1000)
	poster := dbtest.Ledger(t, pool, db.LedgerConfig{Groups: db.GroupOptions{}})
	ctx := context.Background()

	for _, tc := range []struct {
		name  string
		moves int64 // what the other transaction posts while it holds the row
	}{{"moved", 5}, {"unmoved", 0}} {
		start := balance(t, pool, acct)
		other, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Exec(ctx, `SELECT 1 FROM accounts WHERE id = $1 FOR NO KEY UPDATE`, acct); err != nil {
			t.Fatal(err)
		}
		if tc.moves != 0 {
			if _, err := ledger.Post(ctx, other, adjustment(acct, "api:acct_hot:other_"+tc.name, tc.moves)); err != nil {
				t.Fatal(err)
			}
		}
		var postings []db.Posting
		for i := range 3 {
			postings = append(postings, adjustment(acct, fmt.Sprintf("api:%s:%s%d", acct, tc.name, i), 10))
		}
		type result struct {
			errs []error
			left int64
			err  error
		}
		done := make(chan result, 1)
		go func() {
			_, errs, left, err := db.PostGroupPlannedOn(ctx, poster, postings, start)
			done <- result{errs, left, err}
		}()
		waitFor(t, "the group waits for the row", func() bool { return lockWaiters(t, pool, "LedgerAppend") == 1 })
		if err := other.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-done
		want := start + tc.moves + 30
		if r.err != nil || errors.Join(r.errs...) != nil || r.left != want || balance(t, pool, acct) != want {
			t.Fatalf("%s: group = %v %v, left %d, balance %d; want every member posted, leaving %d", tc.name, r.err, r.errs, r.left, balance(t, pool, acct), want)
		}
		if n := transactions(t, pool, acct, tc.name); n != 1 {
			t.Fatalf("%s: the group committed in %d transactions, want one", tc.name, n)
		}
	}
}

// The Poster remembers the balance each group left while the account stays busy: a posting by another
// path between two bursts moves it, and the second burst still commits as one transaction, chained from
// the balance the account really had (posted one by one, as after a failed group, it would take eight).
// The records of its requests, sent with its first append on the remembered balance, roll back with
// it: each request is recorded once.
func TestPosterBalanceMovedBetweenGroups(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	const acct = "acct_hot"
	fundedAccount(t, pool, acct, 100)
	// The drain lingers a window after each group, so a burst right after the other path's posting
	// is planned on the balance the first burst left.
	poster := dbtest.Ledger(t, pool, db.LedgerConfig{Groups: db.GroupOptions{Window: burstWindow}})
	burst := func(name string) []db.Posted {
		var ps []db.Posting
		for i := range 8 {
			ps = append(ps, adjustment(acct, fmt.Sprintf("api:%s:%s%d", acct, name, i), 10))
		}
		outs, errs, pending := postAllAtOnceAudited(poster, ps)
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("%s burst: %v", name, err)
		}
		if n := transactions(t, pool, acct, name); n != 1 {
			t.Fatalf("the %s burst committed in %d transactions, want one", name, n)
		}
		for i, p := range pending {
			if !p.Written() {
				t.Fatalf("%s burst: the record of posting %d was not written with it", name, i)
			}
		}
		return outs
	}
	burst("first")
	if _, err := post(t, pool, adjustment(acct, "api:acct_hot:elsewhere", 500)); err != nil {
		t.Fatal(err)
	}
	outs := burst("second")
	slices.SortFunc(outs, func(a, b db.Posted) int { return cmp.Compare(a.Entry.ID, b.Entry.ID) })
	running := int64(100 + 80 + 500)
	for _, o := range outs {
		running += 10
		if !o.New || o.Entry.BalanceAfter != running {
			t.Fatalf("entry %d = %+v; want posted, its caller told balance %d", o.Entry.ID, o, running)
		}
	}
	if b := balance(t, pool, acct); b != running {
		t.Fatalf("balance %d, want %d", b, running)
	}
	if n := count(t, pool, `SELECT count(*) FROM audit_log WHERE account_id = $1 AND outcome = 'ok'`, acct); n != 16 {
		t.Fatalf("%d records of the two bursts' 16 requests, want one each", n)
	}
}
