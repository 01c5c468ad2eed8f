package db_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

// mustPost posts and fails the test on error.
func mustPost(t *testing.T, pool *pgxpool.Pool, p db.Posting) db.Entry {
	t.Helper()
	posted, err := post(t, pool, p)
	if err != nil {
		t.Fatalf("post %+v: %v", p, err)
	}
	return posted.Entry
}

// adjust posts a positive adjustment whose lot has the given terms.
func adjust(t *testing.T, pool *pgxpool.Pool, account, key string, amount int64, terms db.LotTerms) db.Entry {
	t.Helper()
	return mustPost(t, pool, db.Posting{AccountID: account, Kind: db.KindAdjustment, Amount: amount, DedupeKey: key, Lot: &terms})
}

func use(t *testing.T, pool *pgxpool.Pool, account, key string, amount int64) db.Entry {
	t.Helper()
	return mustPost(t, pool, db.Posting{AccountID: account, Kind: db.KindUsage, Amount: -amount, DedupeKey: key})
}

// lotOf returns the lot made by the credit entry.
func lotOf(t *testing.T, pool *pgxpool.Pool, account string, entry db.Entry) db.Lot {
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

func drawsOf(t *testing.T, pool *pgxpool.Pool, account string, entry db.Entry) []db.Draw {
	t.Helper()
	draws, err := db.EntryDraws(context.Background(), pool, account, []int64{entry.ID})
	if err != nil {
		t.Fatal(err)
	}
	return draws[entry.ID]
}

func debt(t *testing.T, pool *pgxpool.Pool, account string) int64 {
	t.Helper()
	return int64(count(t, pool, `SELECT coalesce(sum(uncovered), 0)::int FROM lot_debts WHERE account_id = $1`, account))
}

func verifyClean(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	violations, err := db.Verify(context.Background(), pool, time.Now(), time.Hour, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range violations {
		t.Errorf("verify: %s", v)
	}
}

func at(d time.Duration) *time.Time {
	t := time.Now().Add(d)
	return &t
}

// Draw order: priority, then expires_at (nulls last), then promotional before paid, then lot id.
func TestLotsDrawOrder(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	createAccount(t, pool, "acct")
	paidA := adjust(t, pool, "acct", "a", 10, db.LotTerms{Category: db.LotPaid, Priority: 50})
	promoB := adjust(t, pool, "acct", "b", 10, db.LotTerms{Category: db.LotPromotional, Priority: 50})
	paidC := adjust(t, pool, "acct", "c", 10, db.LotTerms{Category: db.LotPaid, Priority: 50, ExpiresAt: at(time.Hour)})
	promoD := adjust(t, pool, "acct", "d", 10, db.LotTerms{Category: db.LotPromotional, Priority: 10})
	promoE := adjust(t, pool, "acct", "e", 10, db.LotTerms{Category: db.LotPromotional, Priority: 50, ExpiresAt: at(2 * time.Hour)})
	paidF := adjust(t, pool, "acct", "f", 10, db.LotTerms{Category: db.LotPaid, Priority: 50})
	// priority 10 first; then the expiring ones, sooner first; then promotional; then paid by id.
	want := []db.Entry{promoD, paidC, promoE, promoB, paidA, paidF}

	lots, err := db.Lots(context.Background(), pool, "acct", false, 100)
	if err != nil {
		t.Fatal(err)
	}
	var listed []int64
	for _, l := range lots {
		listed = append(listed, l.EntryID)
	}
	var wantIDs []int64
	for _, e := range want {
		wantIDs = append(wantIDs, e.ID)
	}
	if !slices.Equal(listed, wantIDs) {
		t.Fatalf("lots listed by entry %v, want %v", listed, wantIDs)
	}

	// One debit of 35 takes three lots whole and half the fourth; then each debit of 5 the next.
	debit := use(t, pool, "acct", "u1", 35)
	wantDraws := []db.Draw{
		{LotID: lotOf(t, pool, "acct", promoD).ID, Amount: 10},
		{LotID: lotOf(t, pool, "acct", paidC).ID, Amount: 10},
		{LotID: lotOf(t, pool, "acct", promoE).ID, Amount: 10},
		{LotID: lotOf(t, pool, "acct", promoB).ID, Amount: 5},
	}
	slices.SortFunc(wantDraws, func(a, b db.Draw) int { return cmp.Compare(a.LotID, b.LotID) })
	if got := drawsOf(t, pool, "acct", debit); !slices.Equal(got, wantDraws) {
		t.Fatalf("draws %v, want %v", got, wantDraws)
	}
	for i, next := range []db.Entry{promoB, paidA, paidA, paidF} {
		d := use(t, pool, "acct", fmt.Sprintf("u%d", i+2), 5)
		if got := drawsOf(t, pool, "acct", d); len(got) != 1 || got[0].LotID != lotOf(t, pool, "acct", next).ID {
			t.Fatalf("debit %d drew %v, want the lot of entry %d", i+2, got, next.ID)
		}
	}
	verifyClean(t, pool)
}

// A debit beyond every lot posts in full as debt; the next credit's lot draws the uncovered debits,
// oldest first, so that every debit ends fully drawn.
func TestLotsDebtIsRepaidOldestFirst(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	createAccount(t, pool, "acct")
	grant := adjust(t, pool, "acct", "g", 20, db.LotTerms{Category: db.LotPromotional, Priority: 50})
	u1 := use(t, pool, "acct", "u1", 30)
	u2 := use(t, pool, "acct", "u2", 20)
	if b, d := balance(t, pool, "acct"), debt(t, pool, "acct"); b != -30 || d != 30 {
		t.Fatalf("balance %d, debt %d; want -30 and 30", b, d)
	}
	verifyClean(t, pool)

	top := mustPost(t, pool, db.Posting{AccountID: "acct", Kind: db.KindTopup, Amount: 25, DedupeKey: "t1", PaymentIntent: "pi_1"})
	lot := lotOf(t, pool, "acct", top)
	if lot.Amount != 25 || lot.Remaining != 0 || lot.Category != db.LotPaid {
		t.Fatalf("top-up lot %+v: want amount 25, nothing left, paid", lot)
	}
	// u1 is repaid first (its 10 uncovered), then 15 of u2's 20.
	if got, want := drawsOf(t, pool, "acct", u1), []db.Draw{{lotOf(t, pool, "acct", grant).ID, 20}, {lot.ID, 10}}; !slices.Equal(got, want) {
		t.Fatalf("u1 draws %v, want %v", got, want)
	}
	if got, want := drawsOf(t, pool, "acct", u2), []db.Draw{{lot.ID, 15}}; !slices.Equal(got, want) {
		t.Fatalf("u2 draws %v, want %v", got, want)
	}
	if d := debt(t, pool, "acct"); d != 5 {
		t.Fatalf("debt %d, want 5", d)
	}
	top2 := mustPost(t, pool, db.Posting{AccountID: "acct", Kind: db.KindTopup, Amount: 100, DedupeKey: "t2", PaymentIntent: "pi_2"})
	if l := lotOf(t, pool, "acct", top2); l.Remaining != 95 {
		t.Fatalf("second lot has %d left, want 95", l.Remaining)
	}
	if d := debt(t, pool, "acct"); d != 0 {
		t.Fatalf("debt %d, want 0", d)
	}
	verifyClean(t, pool)
}

// A refund of a partly spent top-up draws that payment's lot first, then the others in order; its
// restore refills exactly the lots it drew.
func TestLotsRefundOfPartlySpentTopup(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	createAccount(t, pool, "acct")
	grant := adjust(t, pool, "acct", "g", 50, db.LotTerms{Category: db.LotPromotional, Priority: 50})
	p := mustPost(t, pool, db.Posting{AccountID: "acct", Kind: db.KindTopup, Amount: 100, DedupeKey: "t1", PaymentIntent: "pi_1"})
	use(t, pool, "acct", "u1", 120) // the grant's 50 (promotional first), then 70 of p
	q := mustPost(t, pool, db.Posting{AccountID: "acct", Kind: db.KindTopup, Amount: 100, DedupeKey: "t2", PaymentIntent: "pi_2"})
	lotG, lotP, lotQ := lotOf(t, pool, "acct", grant), lotOf(t, pool, "acct", p), lotOf(t, pool, "acct", q)
	if lotG.Remaining != 0 || lotP.Remaining != 30 {
		t.Fatalf("before the refund: grant lot %d left, top-up lot %d left; want 0 and 30", lotG.Remaining, lotP.Remaining)
	}

	refund := mustPost(t, pool, db.Posting{AccountID: "acct", Kind: db.KindRefund, Amount: -60, DedupeKey: "stripe:refund:re_1", PaymentIntent: "pi_1"})
	want := []db.Draw{{lotP.ID, 30}, {lotQ.ID, 30}}
	if got := drawsOf(t, pool, "acct", refund); !slices.Equal(got, want) {
		t.Fatalf("refund draws %v, want %v (its payment's lot first)", got, want)
	}
	mustPost(t, pool, db.Posting{AccountID: "acct", Kind: db.KindRefundRestore, Amount: 60, DedupeKey: "stripe:refund-failed:re_1", PaymentIntent: "pi_1", Reverses: "stripe:refund:re_1"})
	if l := lotOf(t, pool, "acct", p); l.Remaining != 30 {
		t.Fatalf("restored top-up lot has %d left, want 30", l.Remaining)
	}
	if l := lotOf(t, pool, "acct", q); l.Remaining != 100 {
		t.Fatalf("restored other lot has %d left, want 100", l.Remaining)
	}
	verifyClean(t, pool)
}

// A dispute won after its lot expired refills that lot, and the refilled credit expires at once; the
// other lot it drew is refilled and stays.
func TestLotsDisputeWonAfterItsLotExpired(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	createAccount(t, pool, "acct")
	p := mustPost(t, pool, db.Posting{AccountID: "acct", Kind: db.KindTopup, Amount: 100, DedupeKey: "t1", PaymentIntent: "pi_1"})
	q := mustPost(t, pool, db.Posting{AccountID: "acct", Kind: db.KindTopup, Amount: 100, DedupeKey: "t2", PaymentIntent: "pi_2"})
	use(t, pool, "acct", "u1", 30) // from p, the older paid lot
	mustPost(t, pool, db.Posting{AccountID: "acct", Kind: db.KindDispute, Amount: -100, DedupeKey: "stripe:dispute:dp_1", PaymentIntent: "pi_1"})
	lotP, lotQ := lotOf(t, pool, "acct", p), lotOf(t, pool, "acct", q)
	if lotP.Remaining != 0 || lotQ.Remaining != 70 {
		t.Fatalf("after the dispute: %d and %d left, want 0 and 70", lotP.Remaining, lotQ.Remaining)
	}
	if _, err := pool.Exec(ctx, `UPDATE credit_lots SET expires_at = now() - interval '1 minute' WHERE id = $1`, lotP.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := dbtest.Ledger(t, pool).ExpireLots(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if l := lotOf(t, pool, "acct", p); l.ClosedAt == nil {
		t.Fatal("the expired empty lot is still open")
	}

	// Posted as the webhook posts it, with OnPosted (the notifier's hook): the expiry the restore set off
	// is handed over too, each entry with its own balance, so that each is notified once.
	var handed []db.Entry
	notified := dbtest.Ledger(t, pool, db.LedgerConfig{OnPosted: func(_ context.Context, _ pgx.Tx, entries []db.Entry) error {
		handed = append(handed, entries...)
		return nil
	}})
	var won db.Entry
	if err := db.InTx(ctx, pool, func(tx pgx.Tx) error {
		posted, err := notified.Post(ctx, tx, db.Posting{AccountID: "acct", Kind: db.KindDisputeWon, Amount: 100,
			DedupeKey: "stripe:dispute-won:dp_1", PaymentIntent: "pi_1", Reverses: "stripe:dispute:dp_1"})
		won = posted.Entry
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range handed {
		got = append(got, fmt.Sprintf("%s %d -> %d", e.Kind, e.Amount, e.BalanceAfter))
	}
	if want := []string{"dispute_won 100 -> 170", "expiry -70 -> 100"}; !slices.Equal(got, want) {
		t.Fatalf("OnPosted was handed %q, want %q", got, want)
	}
	var amount int64
	if err := pool.QueryRow(ctx, `SELECT amount FROM ledger WHERE dedupe_key = $1`,
		fmt.Sprintf("expire:%d:%d", lotP.ID, won.ID)).Scan(&amount); err != nil {
		t.Fatalf("no expiry entry for the refilled, expired lot: %v", err)
	}
	if amount != -70 {
		t.Fatalf("expiry of the refill: %d, want -70", amount)
	}
	if l := lotOf(t, pool, "acct", q); l.Remaining != 100 {
		t.Fatalf("other lot has %d left, want 100", l.Remaining)
	}
	if b := balance(t, pool, "acct"); b != 100 {
		t.Fatalf("balance %d, want 100", b)
	}
	verifyClean(t, pool)
}

// modelLot is a lot as the rules of SPEC §12 say it should be, replayed from the ledger in seq order.
type modelLot struct {
	entry     int64
	terms     db.LotTerms
	remaining int64
}

func (a modelLot) before(b modelLot) int {
	ae, be := a.terms.ExpiresAt, b.terms.ExpiresAt
	return cmp.Or(
		cmp.Compare(a.terms.Priority, b.terms.Priority),
		func() int {
			switch {
			case ae == nil && be == nil:
				return 0
			case ae == nil:
				return 1
			case be == nil:
				return -1
			}
			return ae.Compare(*be)
		}(),
		cmp.Compare(boolInt(a.terms.Category == db.LotPaid), boolInt(b.terms.Category == db.LotPaid)),
		cmp.Compare(a.entry, b.entry),
	)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// The lots depend on the order of the account's entries alone, which its row lock fixes: the same
// credits and debits, posted from concurrent transactions in random interleavings (half of them through
// group commit, whose statements mix credits and debits), end in exactly the lots a replay of the
// ledger in seq order gives, for several seeds.
func TestLotsFollowTheLedgerOrderUnderConcurrency(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	poster := dbtest.Ledger(t, pool, db.LedgerConfig{Groups: db.GroupOptions{Window: 5 * time.Millisecond}})
	for seed := range uint64(4) {
		account := fmt.Sprintf("acct_%d", seed)
		createAccount(t, pool, account)
		rng := rand.New(rand.NewPCG(seed, 16))
		base := time.Now().Truncate(time.Second)
		terms := map[string]db.LotTerms{}
		var ops []db.Posting
		for i := range 40 {
			key := fmt.Sprintf("%s:%d", account, i)
			if rng.IntN(3) == 0 {
				tm := db.LotTerms{Category: []string{db.LotPaid, db.LotPromotional}[rng.IntN(2)], Priority: []int{10, 50, 90}[rng.IntN(3)]}
				if rng.IntN(2) == 0 {
					e := base.Add(time.Duration(1+rng.IntN(3)) * time.Hour)
					tm.ExpiresAt = &e
				}
				terms[key] = tm
				ops = append(ops, db.Posting{AccountID: account, Kind: db.KindAdjustment, Amount: int64(10 + rng.IntN(50)), DedupeKey: key})
			} else {
				ops = append(ops, db.Posting{AccountID: account, Kind: db.KindUsage, Amount: -int64(1 + rng.IntN(30)), DedupeKey: key})
			}
		}
		rng.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for i := w; i < len(ops); i += 8 {
					if tm, ok := terms[ops[i].DedupeKey]; ok {
						ops[i].Lot = &tm
					}
					var err error
					if w%2 == 0 {
						_, err = poster.PostGrouped(ctx, ops[i])
					} else {
						_, err = post(t, pool, ops[i])
					}
					if err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()

		// Replay the ledger in seq order.
		rows, err := pool.Query(ctx, `SELECT id, amount, dedupe_key FROM ledger WHERE account_id = $1 ORDER BY seq`, account)
		if err != nil {
			t.Fatal(err)
		}
		var lots []modelLot
		type owed struct{ entry, uncovered int64 }
		var debts []owed
		draw := func(need int64) int64 {
			slices.SortFunc(lots, modelLot.before)
			for i := range lots {
				take := min(need, lots[i].remaining)
				lots[i].remaining -= take
				need -= take
			}
			return need
		}
		for rows.Next() {
			var id, amount int64
			var key string
			if err := rows.Scan(&id, &amount, &key); err != nil {
				t.Fatal(err)
			}
			if amount < 0 {
				if left := draw(-amount); left > 0 {
					debts = append(debts, owed{id, left})
				}
				continue
			}
			lots = append(lots, modelLot{entry: id, terms: terms[key], remaining: amount})
			for len(debts) > 0 {
				debts[0].uncovered = draw(debts[0].uncovered)
				if debts[0].uncovered > 0 {
					break
				}
				debts = debts[1:]
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		var wantDebt int64
		for _, d := range debts {
			wantDebt += d.uncovered
		}
		if got := debt(t, pool, account); got != wantDebt {
			t.Errorf("seed %d: debt %d, replay says %d", seed, got, wantDebt)
		}
		got, err := db.Lots(ctx, pool, account, true, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(lots) {
			t.Fatalf("seed %d: %d lots, replay says %d", seed, len(got), len(lots))
		}
		slices.SortFunc(lots, modelLot.before)
		for i, l := range got {
			if l.EntryID != lots[i].entry || l.Remaining != lots[i].remaining {
				t.Errorf("seed %d: lot %d is entry %d with %d left, replay says entry %d with %d",
					seed, i, l.EntryID, l.Remaining, lots[i].entry, lots[i].remaining)
			}
		}
	}
	verifyClean(t, pool)
}

// Expiry racing debits: both lock the account, so whatever a debit drew was not expired, and the
// expiry took exactly what was left: draws by debits + the expiry = the lot.
func TestLotsExpiryRacingDebitsNeverSpendsExpiredCredit(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	createAccount(t, pool, "acct")
	top := mustPost(t, pool, db.Posting{AccountID: "acct", Kind: db.KindTopup, Amount: 5000, DedupeKey: "t1", PaymentIntent: "pi_1"})
	lot := lotOf(t, pool, "acct", top)
	if _, err := pool.Exec(ctx, `UPDATE credit_lots SET expires_at = now() + interval '300 milliseconds' WHERE id = $1`, lot.ID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(700 * time.Millisecond)
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				if _, err := post(t, pool, db.Posting{AccountID: "acct", Kind: db.KindUsage, Amount: -7, DedupeKey: fmt.Sprintf("u:%d:%d", w, i)}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for time.Now().Before(deadline) {
			if _, _, err := dbtest.Ledger(t, pool).ExpireLots(ctx, 10); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	if _, _, err := dbtest.Ledger(t, pool).ExpireLots(ctx, 10); err != nil {
		t.Fatal(err)
	}
	lot = lotOf(t, pool, "acct", top)
	if lot.ClosedAt == nil || lot.Remaining != 0 {
		t.Fatalf("lot %+v: want closed with nothing left", lot)
	}
	spent := count(t, pool, `SELECT coalesce(sum(d.amount), 0)::int FROM lot_draws d JOIN ledger l ON l.account_id = d.account_id AND l.id = d.entry_id
		WHERE d.lot_id = $1 AND l.kind = 'usage'`, lot.ID)
	expired := count(t, pool, `SELECT coalesce(-sum(amount), 0)::int FROM ledger WHERE account_id = 'acct' AND kind = 'expiry'`)
	if spent+expired != 5000 || expired == 0 || spent == 0 {
		t.Fatalf("spent %d and expired %d of a 5000 lot: want both, adding up to it", spent, expired)
	}
	verifyClean(t, pool)
}

// An account of 100 lots billed set-based: a chunk of decisions drains a prefix of the lots in draw
// order, and nothing after it.
func TestLotsHundredLotAccountBilled(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	createAccount(t, pool, "acct")
	for i := range 100 {
		adjust(t, pool, "acct", fmt.Sprintf("c%d", i), 100, db.LotTerms{
			Category: []string{db.LotPaid, db.LotPromotional}[i%2], Priority: (i % 5) * 20,
		})
	}
	var batch []db.Decision
	for i := range 1234 {
		batch = append(batch, db.Decision{ID: fmt.Sprintf("d%d", i), AccountID: "acct", Cost: 3, OccurredAt: time.Now()})
	}
	if _, err := db.StoreDecisions(ctx, pool, batch); err != nil {
		t.Fatal(err)
	}
	last, err := db.LastDecisionSeq(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dbtest.Ledger(t, pool).BillChunk(ctx, 0, last, 10_000); err != nil {
		t.Fatal(err)
	}
	lots, err := db.Lots(ctx, pool, "acct", true, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var drawn int64
	for i, l := range lots {
		drawn += l.Amount - l.Remaining
		switch {
		case i < 37 && l.Remaining != 0, i == 37 && l.Remaining != 100-2, i > 37 && l.Remaining != 100:
			t.Errorf("lot %d in draw order (priority %d, %s) has %d left", i, l.Priority, l.Category, l.Remaining)
		}
	}
	if drawn != 3*1234 {
		t.Fatalf("lots drawn by %d, want %d", drawn, 3*1234)
	}
	if n := count(t, pool, `SELECT count(DISTINCT entry_id)::int FROM lot_draws d JOIN ledger l ON l.account_id = d.account_id AND l.id = d.entry_id WHERE l.kind = 'usage'`); n != 1234 {
		t.Fatalf("%d usage entries drew lots, want 1234", n)
	}
	verifyClean(t, pool)
}

// PAID_CREDIT_TTL and GRANT_TTL travel with the postings of the Ledger configured with them: a top-up's
// lot expires after the first, the signup grant's after the second, a positive adjustment's as it asked
// (never by default).
func TestLotsTTLsFromTheLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	withTTLs := dbtest.Ledger(t, pool, db.LedgerConfig{PaidCreditTTL: 720 * time.Hour, GrantTTL: 90 * time.Minute})
	created, err := withTTLs.CreateAccount(ctx, "acct", "usd", 500)
	if err != nil || !created.Granted {
		t.Fatalf("create account: %+v, %v", created, err)
	}
	mustPost := func(t *testing.T, pool *db.Pool, p db.Posting) db.Entry {
		t.Helper()
		var posted db.Posted
		err := db.InTx(ctx, pool, func(tx db.Tx) error {
			var err error
			posted, err = withTTLs.Post(ctx, tx, p)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return posted.Entry
	}
	grant, err := db.Entries(ctx, pool, "acct", 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	top := mustPost(t, pool, db.Posting{AccountID: "acct", Kind: db.KindTopup, Amount: 100, DedupeKey: "t1", PaymentIntent: "pi_1"})
	adj := mustPost(t, pool, db.Posting{AccountID: "acct", Kind: db.KindAdjustment, Amount: 5, DedupeKey: "a1"})
	for _, c := range []struct {
		entry    db.Entry
		category string
		ttl      time.Duration
	}{{grant[0], db.LotPromotional, 90 * time.Minute}, {top, db.LotPaid, 720 * time.Hour}, {adj, db.LotPromotional, 0}} {
		l := lotOf(t, pool, "acct", c.entry)
		if l.Category != c.category || l.Priority != db.DefaultLotPriority {
			t.Errorf("%s lot: %s priority %d, want %s %d", c.entry.Kind, l.Category, l.Priority, c.category, db.DefaultLotPriority)
		}
		switch {
		case c.ttl == 0 && l.ExpiresAt != nil:
			t.Errorf("%s lot expires at %s, want never", c.entry.Kind, l.ExpiresAt)
		case c.ttl != 0 && (l.ExpiresAt == nil || !l.ExpiresAt.Equal(c.entry.CreatedAt.Add(c.ttl))):
			t.Errorf("%s lot expires at %v, want %s after %s", c.entry.Kind, l.ExpiresAt, c.ttl, c.entry.CreatedAt)
		}
	}
}

// Voiding posts a void entry for what is left, once; the lot is closed and never drawn again.
func TestLotsVoid(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	createAccount(t, pool, "acct")
	a := adjust(t, pool, "acct", "a", 50, db.LotTerms{Category: db.LotPromotional, Priority: 0})
	b := adjust(t, pool, "acct", "b", 50, db.LotTerms{Category: db.LotPaid, Priority: 50})
	use(t, pool, "acct", "u1", 20)
	lot := lotOf(t, pool, "acct", a)
	voided, err := dbtest.Ledger(t, pool).VoidLot(ctx, lot.ID)
	if err != nil || !voided.Posted || voided.Entry.Amount != -30 || voided.Entry.Kind != db.KindVoid || voided.Lot.ClosedAt == nil {
		t.Fatalf("void: %+v, %v; want a void entry of -30 and a closed lot", voided, err)
	}
	again, err := dbtest.Ledger(t, pool).VoidLot(ctx, lot.ID)
	if err != nil || again.Posted {
		t.Fatalf("void again: %+v, %v; want nothing posted", again, err)
	}
	d := use(t, pool, "acct", "u2", 10)
	if got := drawsOf(t, pool, "acct", d); len(got) != 1 || got[0].LotID != lotOf(t, pool, "acct", b).ID {
		t.Fatalf("after the void a debit drew %v, want the other lot", got)
	}
	if _, err := dbtest.Ledger(t, pool).VoidLot(ctx, 999_999); !errors.Is(err, db.ErrLotNotFound) {
		t.Fatalf("void of no lot: %v, want ErrLotNotFound", err)
	}
	if b := balance(t, pool, "acct"); b != 40 {
		t.Fatalf("balance %d, want 40", b)
	}
	verifyClean(t, pool)
}

// A hold's capture is a debit like any other: it draws the lots in order.
func TestLotsHoldCaptureDraws(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	createAccount(t, pool, "acct")
	paid := adjust(t, pool, "acct", "p", 100, db.LotTerms{Category: db.LotPaid, Priority: 50})
	promo := adjust(t, pool, "acct", "q", 30, db.LotTerms{Category: db.LotPromotional, Priority: 50})
	if _, err := db.AuthoriseHold(ctx, pool, "acct", db.HoldRequest{ID: "h1", Amount: 50, ExpiresIn: time.Minute}); err != nil {
		t.Fatal(err)
	}
	captured, err := dbtest.Ledger(t, pool).CaptureHold(ctx, "acct", "h1", 50)
	if err != nil {
		t.Fatal(err)
	}
	want := []db.Draw{{lotOf(t, pool, "acct", paid).ID, 20}, {lotOf(t, pool, "acct", promo).ID, 30}}
	slices.SortFunc(want, func(a, b db.Draw) int { return cmp.Compare(a.LotID, b.LotID) })
	if got := drawsOf(t, pool, "acct", captured.Entry); !slices.Equal(got, want) {
		t.Fatalf("capture drew %v, want %v", got, want)
	}
	verifyClean(t, pool)
}

// The README's worked example, step by step.
func TestLotsReadmeExample(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	createAccount(t, pool, "acct")
	grant := adjust(t, pool, "acct", "grant", 500, db.LotTerms{Category: db.LotPromotional, Priority: 50, ExpiresAt: at(30 * 24 * time.Hour)})
	topA := mustPost(t, pool, db.Posting{AccountID: "acct", Kind: db.KindTopup, Amount: 2000, DedupeKey: "stripe:evt_A", PaymentIntent: "pi_A"})
	goodwill := adjust(t, pool, "acct", "goodwill", 300, db.LotTerms{Category: db.LotPromotional, Priority: 10})
	left := func(e db.Entry) int64 { return lotOf(t, pool, "acct", e).Remaining }

	use(t, pool, "acct", "u1", 1000)
	if g, w, a := left(grant), left(goodwill), left(topA); g != 0 || w != 0 || a != 1800 {
		t.Fatalf("after the usage: grant %d, goodwill %d, top-up %d; want 0, 0, 1800", g, w, a)
	}
	mustPost(t, pool, db.Posting{AccountID: "acct", Kind: db.KindRefund, Amount: -1900, DedupeKey: "stripe:refund:re_A", PaymentIntent: "pi_A"})
	if a, b, d := left(topA), balance(t, pool, "acct"), debt(t, pool, "acct"); a != 0 || b != -100 || d != 100 {
		t.Fatalf("after the refund: top-up %d, balance %d, debt %d; want 0, -100, 100", a, b, d)
	}
	topB := mustPost(t, pool, db.Posting{AccountID: "acct", Kind: db.KindTopup, Amount: 1000, DedupeKey: "stripe:evt_B", PaymentIntent: "pi_B"})
	if b, l, d := balance(t, pool, "acct"), lotOf(t, pool, "acct", topB), debt(t, pool, "acct"); b != 900 || l.Amount != 1000 || l.Remaining != 900 || d != 0 {
		t.Fatalf("after the second top-up: balance %d, lot %d/%d, debt %d; want 900, 900/1000, 0", b, l.Remaining, l.Amount, d)
	}
	verifyClean(t, pool)
}

// The README's alternative: the refund fails before the second top-up; its credit goes back to the
// top-up's lot and the 100 of debt it made is cancelled.
func TestLotsReadmeExampleRefundFailed(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	createAccount(t, pool, "acct")
	adjust(t, pool, "acct", "grant", 500, db.LotTerms{Category: db.LotPromotional, Priority: 50, ExpiresAt: at(30 * 24 * time.Hour)})
	topA := mustPost(t, pool, db.Posting{AccountID: "acct", Kind: db.KindTopup, Amount: 2000, DedupeKey: "stripe:evt_A", PaymentIntent: "pi_A"})
	adjust(t, pool, "acct", "goodwill", 300, db.LotTerms{Category: db.LotPromotional, Priority: 10})
	use(t, pool, "acct", "u1", 1000)
	mustPost(t, pool, db.Posting{AccountID: "acct", Kind: db.KindRefund, Amount: -1900, DedupeKey: "stripe:refund:re_A", PaymentIntent: "pi_A"})
	mustPost(t, pool, db.Posting{AccountID: "acct", Kind: db.KindRefundRestore, Amount: 1900, DedupeKey: "stripe:refund-failed:re_A", PaymentIntent: "pi_A", Reverses: "stripe:refund:re_A"})
	if a, b, d := lotOf(t, pool, "acct", topA).Remaining, balance(t, pool, "acct"), debt(t, pool, "acct"); a != 1800 || b != 1800 || d != 0 {
		t.Fatalf("after the failed refund: top-up %d, balance %d, debt %d; want 1800, 1800, 0", a, b, d)
	}
	verifyClean(t, pool)
}
