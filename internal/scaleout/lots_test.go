//go:build citus

package scaleout_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/reconcile"
)

// Credit lots and auto-recharge on the cluster (SPEC §12, §13): ledger_lots and accounts_available_watch
// run on the account's shard (sql/citus/prepare.sql) with the same rules as on plain PostgreSQL, and
// TestMain's verify checks the lot invariants over everything below.

func post(t *testing.T, p db.Posting) (db.Posted, error) {
	t.Helper()
	var out db.Posted
	err := db.InTx(context.Background(), pool, func(tx db.Tx) error {
		var err error
		out, err = new(db.Ledger).Post(context.Background(), tx, p)
		return err
	})
	return out, err
}

func mustPost(t *testing.T, p db.Posting) db.Entry {
	t.Helper()
	out, err := post(t, p)
	if err != nil {
		t.Fatalf("post %+v: %v", p, err)
	}
	return out.Entry
}

// adjust posts a positive adjustment whose lot has the given terms.
func adjust(t *testing.T, account, key string, amount int64, terms db.LotTerms) db.Entry {
	t.Helper()
	return mustPost(t, db.Posting{AccountID: account, Kind: db.KindAdjustment, Amount: amount, DedupeKey: key, Lot: &terms})
}

// lotOf is the lot the credit entry made.
func lotOf(t *testing.T, account string, entry db.Entry) db.Lot {
	t.Helper()
	lots, err := db.Lots(context.Background(), pool, account, true, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lots {
		if l.EntryID == entry.ID {
			return l
		}
	}
	t.Fatalf("no lot for entry %d (%s %d)", entry.ID, entry.Kind, entry.Amount)
	return db.Lot{}
}

func drawsOf(t *testing.T, account string, entry db.Entry) []db.Draw {
	t.Helper()
	draws, err := db.EntryDraws(context.Background(), pool, account, []int64{entry.ID})
	if err != nil {
		t.Fatal(err)
	}
	return draws[entry.ID]
}

// Lots of different priorities, expiries and categories are drawn in the fixed order by a billing chunk
// of the reconciler (two decisions in one statement on the shard), by a refund (its payment's lot first)
// and by a later debit; GET …/lots lists them in that order.
func TestCitusLotsDrawnInOrder(t *testing.T) {
	ctx := context.Background()
	const acct = "acct_lots_order"
	createAccount(t, acct, 0)
	in := time.Now().Add(time.Hour).Truncate(time.Second)
	a := adjust(t, acct, "lo:a", 40, db.LotTerms{Category: db.LotPromotional, Priority: 10})
	b := adjust(t, acct, "lo:b", 30, db.LotTerms{Category: db.LotPaid, Priority: 50, ExpiresAt: &in})
	c := adjust(t, acct, "lo:c", 30, db.LotTerms{Category: db.LotPromotional, Priority: 50, ExpiresAt: &in})
	d := adjust(t, acct, "lo:d", 50, db.LotTerms{Category: db.LotPromotional, Priority: 50})
	top := mustPost(t, db.Posting{AccountID: acct, Kind: db.KindTopup, Amount: 100, DedupeKey: "lo:t", PaymentIntent: "pi_lots_order"})
	la, lb, lc, ld, lt := lotOf(t, acct, a), lotOf(t, acct, b), lotOf(t, acct, c), lotOf(t, acct, d), lotOf(t, acct, top)

	listed, err := db.Lots(ctx, pool, acct, false, 100)
	if err != nil {
		t.Fatal(err)
	}
	var order []int64
	for _, l := range listed {
		order = append(order, l.ID)
	}
	if want := []int64{la.ID, lc.ID, lb.ID, ld.ID, lt.ID}; !slices.Equal(order, want) {
		t.Fatalf("lots listed %v, want %v (priority, expiry nulls last, promotional first)", order, want)
	}

	if _, err := pool.Exec(ctx, `INSERT INTO decisions (id, account_id, cost) VALUES ('dec_lo_1', $1, 45), ('dec_lo_2', $1, 30)`, acct); err != nil {
		t.Fatal(err)
	}
	if rep, err := reconcile.New(reconcile.Deps{Pool: pool, Ledger: dbtest.Ledger(t, pool)}, reconcile.Options{ChunkSize: 1000}).Bill(ctx, 0); err != nil || rep.Billed != 2 {
		t.Fatalf("bill: %+v %v, want 2 billed", rep, err)
	}
	usage := map[string]db.Entry{}
	entries, err := db.Entries(ctx, pool, acct, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		usage[e.DedupeKey] = e
	}
	for key, want := range map[string][]db.Draw{
		"decision:dec_lo_1": {{LotID: la.ID, Amount: 40}, {LotID: lc.ID, Amount: 5}},
		"decision:dec_lo_2": {{LotID: lb.ID, Amount: 5}, {LotID: lc.ID, Amount: 25}}, // listed by lot id
	} {
		e, ok := usage[key]
		if !ok {
			t.Fatalf("no entry %s", key)
		}
		if got := drawsOf(t, acct, e); !slices.Equal(got, want) {
			t.Errorf("%s draws %v, want %v", key, got, want)
		}
	}

	refund := mustPost(t, db.Posting{AccountID: acct, Kind: db.KindRefund, Amount: -60, DedupeKey: "stripe:refund:re_lots_order", PaymentIntent: "pi_lots_order"})
	if got, want := drawsOf(t, acct, refund), []db.Draw{{LotID: lt.ID, Amount: 60}}; !slices.Equal(got, want) {
		t.Fatalf("refund draws %v, want %v (its payment's lot first)", got, want)
	}
	spend := mustPost(t, db.Posting{AccountID: acct, Kind: db.KindUsage, Amount: -60, DedupeKey: "lo:u"})
	if got, want := drawsOf(t, acct, spend), []db.Draw{{LotID: lb.ID, Amount: 25}, {LotID: ld.ID, Amount: 35}}; !slices.Equal(got, want) {
		t.Fatalf("usage draws %v, want %v", got, want)
	}
	// Spending beyond every lot is debt, which the next credit repays first.
	over := mustPost(t, db.Posting{AccountID: acct, Kind: db.KindUsage, Amount: -70, DedupeKey: "lo:over"})
	refill := mustPost(t, db.Posting{AccountID: acct, Kind: db.KindGrant, Amount: 20, DedupeKey: "lo:g"})
	if got, want := drawsOf(t, acct, over), []db.Draw{{LotID: ld.ID, Amount: 15}, {LotID: lt.ID, Amount: 40}, {LotID: lotOf(t, acct, refill).ID, Amount: 15}}; !slices.Equal(got, want) {
		t.Fatalf("over-spend draws %v, want %v (debt repaid by the next credit)", got, want)
	}
	if balance, _ := balanceOf(t, acct); balance != 5 {
		t.Fatalf("balance %d, want 5", balance)
	}
}

// The reconciler's expiry pass posts expire:{lot_id} for what is left of each lot past its expiry and
// closes the empty ones, once; a void by lot id takes what is left of another, once.
func TestCitusLotsExpireInTheReconcilerPass(t *testing.T) {
	ctx := context.Background()
	const acct = "acct_lots_expiry"
	createAccount(t, acct, 0)
	past := time.Now().Add(-time.Minute)
	partly := adjust(t, acct, "le:partly", 50, db.LotTerms{Category: db.LotPromotional, Priority: 10, ExpiresAt: &past})
	empty := adjust(t, acct, "le:empty", 20, db.LotTerms{Category: db.LotPromotional, Priority: 5, ExpiresAt: &past})
	kept := adjust(t, acct, "le:kept", 100, db.LotTerms{Category: db.LotPaid, Priority: 50})
	voided := adjust(t, acct, "le:void", 30, db.LotTerms{Category: db.LotPaid, Priority: 60})
	drained := adjust(t, acct, "le:drained", 10, db.LotTerms{Category: db.LotPaid, Priority: 1})
	mustPost(t, db.Posting{AccountID: acct, Kind: db.KindUsage, Amount: -40, DedupeKey: "le:u"}) // drained's 10, empty's 20, 10 of partly

	r := reconcile.New(reconcile.Deps{Pool: pool, Ledger: dbtest.Ledger(t, pool)}, reconcile.Options{})
	n, err := r.ExpireLots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lp, le := lotOf(t, acct, partly), lotOf(t, acct, empty)
	if lp.ClosedAt == nil || lp.Remaining != 0 || le.ClosedAt == nil {
		t.Fatalf("after the pass: partly %+v, empty %+v; want both closed", lp, le)
	}
	var amount int64
	var expiries int
	if err := pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(amount), 0) FROM ledger WHERE account_id = $1 AND kind = 'expiry' AND dedupe_key = $2`,
		acct, db.ExpiryKey(lp.ID)).Scan(&expiries, &amount); err != nil {
		t.Fatal(err)
	}
	if n < 1 || expiries != 1 || amount != -40 {
		t.Fatalf("pass posted %d; %d expiry entries of %d for lot %d, want one of -40", n, expiries, amount, lp.ID)
	}
	if again, err := r.ExpireLots(ctx); err != nil || again != 0 {
		t.Fatalf("second pass: %d %v, want nothing", again, err)
	}

	lv := lotOf(t, acct, voided)
	for i, wantPosted := range []bool{true, false} {
		out, err := dbtest.Ledger(t, pool).VoidLot(ctx, lv.ID)
		if err != nil || out.Posted != wantPosted || out.Lot.ClosedAt == nil || out.Lot.Remaining != 0 {
			t.Fatalf("void %d of lot %d: %+v %v, want posted %t and closed", i, lv.ID, out, err, wantPosted)
		}
	}
	// A lot with nothing left is closed without an entry.
	if out, err := dbtest.Ledger(t, pool).VoidLot(ctx, lotOf(t, acct, drained).ID); err != nil || out.Posted || out.Lot.ClosedAt == nil {
		t.Fatalf("void of a drained lot: %+v %v, want closed without an entry", out, err)
	}
	if _, err := dbtest.Ledger(t, pool).VoidLot(ctx, 1); !errors.Is(err, db.ErrLotNotFound) {
		t.Fatalf("void of a missing lot: %v, want ErrLotNotFound", err)
	}
	if balance, _ := balanceOf(t, acct); balance != 100 || lotOf(t, acct, kept).Remaining != 100 {
		t.Fatalf("balance %d, want the kept lot's 100", balance)
	}
}

// The lot lifetimes configured on the Ledger (PAID_CREDIT_TTL, GRANT_TTL) travel with its postings to the
// trigger on the worker that makes the lot.
func TestCitusLotTTLsFromTheLedger(t *testing.T) {
	ctx := context.Background()
	withTTLs := dbtest.Ledger(t, pool, db.LedgerConfig{PaidCreditTTL: 720 * time.Hour, GrantTTL: 90 * time.Minute})
	const acct = "acct_lots_ttl"
	if created, err := withTTLs.CreateAccount(ctx, acct, "usd", 500); err != nil || !created.Granted {
		t.Fatalf("create account: %+v, %v", created, err)
	}
	grant, err := db.Entries(ctx, pool, acct, 0, 1)
	if err != nil || len(grant) != 1 {
		t.Fatalf("the signup grant: %v %v", grant, err)
	}
	var top db.Posted
	err = db.InTx(ctx, pool, func(tx db.Tx) error {
		top, err = withTTLs.Post(ctx, tx, db.Posting{AccountID: acct, Kind: db.KindTopup, Amount: 100, DedupeKey: "lt:t", PaymentIntent: "pi_lots_ttl"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		entry db.Entry
		ttl   time.Duration
	}{{grant[0], 90 * time.Minute}, {top.Entry, 720 * time.Hour}} {
		l := lotOf(t, acct, c.entry)
		if l.ExpiresAt == nil || !l.ExpiresAt.Equal(c.entry.CreatedAt.Add(c.ttl)) {
			t.Errorf("%s lot expires at %v, want %s after %s", c.entry.Kind, l.ExpiresAt, c.ttl, c.entry.CreatedAt)
		}
	}
	// A Ledger without lifetimes makes lots that never expire.
	other := mustPost(t, db.Posting{AccountID: acct, Kind: db.KindTopup, Amount: 10, DedupeKey: "lt:t2", PaymentIntent: "pi_lots_ttl_2"})
	if l := lotOf(t, acct, other); l.ExpiresAt != nil {
		t.Errorf("lot made without lifetimes expires at %s, want never", l.ExpiresAt)
	}
}

// Concurrent debits (single posts and the API's poster) on one account with three lots: the lock orders
// them, so the lots end exactly as the debits applied one after another would leave them.
func TestCitusLotsConcurrentDebitsOnOneAccount(t *testing.T) {
	ctx := context.Background()
	const acct = "acct_lots_hot"
	createAccount(t, acct, 0)
	var lots []db.Entry
	for i, prio := range []int{30, 10, 20} {
		lots = append(lots, adjust(t, acct, fmt.Sprintf("lh:%d", i), 100, db.LotTerms{Category: db.LotPaid, Priority: prio}))
	}
	poster := dbtest.Ledger(t, pool, db.LedgerConfig{Groups: db.GroupOptions{}})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := db.Posting{AccountID: acct, Kind: db.KindUsage, Amount: -4, DedupeKey: fmt.Sprintf("lh:u:%d", i)}
			var err error
			if i%2 == 0 {
				_, err = poster.PostGrouped(ctx, p)
			} else {
				_, err = post(t, p)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// 256 drawn: the priority-10 lot, the priority-20 lot, then 56 of the priority-30 lot.
	for i, want := range []int64{44, 0, 0} {
		if l := lotOf(t, acct, lots[i]); l.Remaining != want {
			t.Errorf("lot of priority %d has %d left, want %d", l.Priority, l.Remaining, want)
		}
	}
	var bad int
	err := pool.QueryRow(ctx, `
		SELECT count(*) FROM ledger l
		WHERE l.account_id = $1 AND l.kind = 'usage'
		  AND -l.amount <> (SELECT coalesce(sum(d.amount), 0) FROM lot_draws d WHERE d.account_id = $1 AND d.entry_id = l.id)`,
		acct).Scan(&bad)
	if err != nil || bad != 0 {
		t.Fatalf("%d debits not fully drawn (%v)", bad, err)
	}
}

// Debits racing across an account's recharge threshold start one attempt (with its pending order) for
// the episode, and one low-balance alert: accounts_available_watch runs at commit on the account's shard.
func TestCitusRechargeOneAttemptPerEpisode(t *testing.T) {
	ctx := context.Background()
	const acct = "acct_recharge"
	createAccount(t, acct, 1000)
	if _, err := pool.Exec(ctx, `UPDATE accounts SET stripe_customer = 'cus_scaleout', payment_method = 'pm_scaleout' WHERE id = $1`, acct); err != nil {
		t.Fatal(err)
	}
	threshold, amount, alert := int64(500), int64(2000), int64(400)
	if _, err := db.SetRecharge(ctx, pool, acct, true, &threshold, &amount); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetLowBalanceAlert(ctx, pool, acct, &alert); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := post(t, db.Posting{AccountID: acct, Kind: db.KindUsage, Amount: -30, DedupeKey: fmt.Sprintf("rc:u:%d", i)}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("debit: %v", err)
	}
	if balance, _ := balanceOf(t, acct); balance != 40 {
		t.Fatalf("balance %d, want 40", balance)
	}
	var attempts, orders, alerts int
	var episode int64
	err := pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM recharge_attempts WHERE account_id = $1),
		       (SELECT coalesce(max(episode), 0) FROM recharge_attempts WHERE account_id = $1),
		       (SELECT count(*) FROM topups t JOIN recharge_attempts r ON r.account_id = t.account_id AND r.topup_id = t.id
		         WHERE t.account_id = $1 AND t.status = 'pending' AND t.amount = $2),
		       (SELECT count(*) FROM balance_alerts WHERE account_id = $1 AND threshold = $3)`,
		acct, amount, alert).Scan(&attempts, &episode, &orders, &alerts)
	if err != nil {
		t.Fatal(err)
	}
	if attempts != 1 || episode != 1 || orders != 1 || alerts != 1 {
		t.Fatalf("%d attempts (episode %d), %d pending orders, %d alerts; want one of each in episode 1", attempts, episode, orders, alerts)
	}
}

// A refund that failed after its payment's lot expired refills that lot, and the refilled credit expires
// at once: the restore's trigger posts the expiry entry itself, on the account's shard.
func TestCitusLotsRestoreAfterTheLotExpired(t *testing.T) {
	ctx := context.Background()
	const acct = "acct_lots_restore"
	createAccount(t, acct, 0)
	past := time.Now().Add(-time.Minute)
	top := mustPost(t, db.Posting{AccountID: acct, Kind: db.KindTopup, Amount: 100, DedupeKey: "lr:t", PaymentIntent: "pi_lots_restore",
		Lot: &db.LotTerms{Category: db.LotPaid, Priority: 50, ExpiresAt: &past}})
	mustPost(t, db.Posting{AccountID: acct, Kind: db.KindRefund, Amount: -60, DedupeKey: "stripe:refund:re_lots_restore", PaymentIntent: "pi_lots_restore"})
	if _, err := reconcile.New(reconcile.Deps{Pool: pool, Ledger: dbtest.Ledger(t, pool)}, reconcile.Options{}).ExpireLots(ctx); err != nil {
		t.Fatal(err)
	}
	restore := mustPost(t, db.Posting{AccountID: acct, Kind: db.KindRefundRestore, Amount: 60, DedupeKey: "stripe:refund-failed:re_lots_restore", PaymentIntent: "pi_lots_restore", Reverses: "stripe:refund:re_lots_restore"})
	lot := lotOf(t, acct, top)
	var expired int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(amount), 0) FROM ledger WHERE account_id = $1 AND kind = 'expiry' AND dedupe_key = $2`,
		acct, fmt.Sprintf("expire:%d:%d", lot.ID, restore.ID)).Scan(&expired); err != nil {
		t.Fatal(err)
	}
	if balance, _ := balanceOf(t, acct); expired != -60 || balance != 0 || lot.Remaining != 0 || lot.ClosedAt == nil {
		t.Fatalf("restored credit expired %d, balance %d, lot %+v; want -60, 0 and the lot closed empty", expired, balance, lot)
	}
}
