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

// topupAt posts a paid top-up of credits bought for price (in currency's minor units), as the webhook
// credits a paid order.
func topupAt(t *testing.T, pool *pgxpool.Pool, account, key, paymentIntent string, credits, price int64, currency string) db.Entry {
	t.Helper()
	return mustPost(t, pool, db.Posting{
		AccountID: account, Kind: db.KindTopup, Amount: credits, DedupeKey: key, PaymentIntent: paymentIntent,
		Cost: &db.Cost{Amount: price, Currency: currency},
	})
}

// recognisedOf is the lot's recognition rows, net of restores, and how many rows it has.
func recognisedOf(t *testing.T, pool *pgxpool.Pool, account string, lotID int64) (net int64, rows int) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `
		SELECT coalesce(sum(CASE WHEN kind = 'restored' THEN -amount ELSE amount END), 0)::bigint, count(*)::int
		FROM revenue_recognitions WHERE account_id = $1 AND lot_id = $2`, account, lotID).Scan(&net, &rows)
	if err != nil {
		t.Fatal(err)
	}
	return net, rows
}

// splitInto cuts total into parts of 1..maxPart, in a seeded order.
func splitInto(rng *rand.Rand, total, maxPart int64) []int64 {
	var parts []int64
	for total > 0 {
		p := min(total, 1+rng.Int64N(maxPart))
		parts = append(parts, p)
		total -= p
	}
	return parts
}

// A lot bought at a price that does not divide evenly (1000 credits for 333) recognises exactly its
// cost once drawn to zero, by many small draws, each row the difference the draw made to
// floor(333 * drawn / 1000): never a cent more or less than the price, whatever the draws' sizes.
func TestRevenueUnevenLotDrawnToZeroRecognisesItsCost(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	createAccount(t, pool, "acct")
	top := topupAt(t, pool, "acct", "t1", "pi_1", 1000, 333, "usd")
	lot := lotOf(t, pool, "acct", top)
	rng := rand.New(rand.NewPCG(7, 7))
	for i, amount := range splitInto(rng, 1000, 7) {
		use(t, pool, "acct", fmt.Sprintf("u%d", i), amount)
		if i == 0 {
			// A draw of at most 7 credits of 1000 bought for 333: at most 2 cents so far.
			if net, _ := recognisedOf(t, pool, "acct", lot.ID); net > 2 {
				t.Fatalf("first draw of %d recognised %d", amount, net)
			}
		}
	}
	net, rows := recognisedOf(t, pool, "acct", lot.ID)
	if net != 333 {
		t.Fatalf("lot drawn to zero recognised %d of its cost 333 (%d rows)", net, rows)
	}
	if n := count(t, pool, `SELECT count(*)::int FROM revenue_recognitions WHERE kind <> 'recognised' OR currency <> 'usd'`); n != 0 {
		t.Fatalf("%d rows are not usage recognised in usd", n)
	}
	verifyClean(t, pool)
}

// The same lot drawn to zero by concurrent debits, each in its own transaction: the account's lock
// orders them, and the lot still recognises exactly its cost.
func TestRevenueConcurrentDrawsRecogniseExactlyTheCost(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	createAccount(t, pool, "acct")
	top := topupAt(t, pool, "acct", "t1", "pi_1", 1000, 333, "usd")
	// A second lot at another odd price, drawn after the first.
	top2 := topupAt(t, pool, "acct", "t2", "pi_2", 700, 101, "usd")
	parts := splitInto(rand.New(rand.NewPCG(3, 9)), 1700, 9)
	var wg sync.WaitGroup
	errs := make(chan error, len(parts))
	const workers = 16
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(parts); i += workers {
				if _, err := post(t, pool, db.Posting{AccountID: "acct", Kind: db.KindUsage, Amount: -parts[i], DedupeKey: fmt.Sprintf("u%d", i)}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if b := balance(t, pool, "acct"); b != 0 {
		t.Fatalf("balance %d, want 0", b)
	}
	for _, c := range []struct {
		entry db.Entry
		cost  int64
	}{{top, 333}, {top2, 101}} {
		if net, rows := recognisedOf(t, pool, "acct", lotOf(t, pool, "acct", c.entry).ID); net != c.cost {
			t.Errorf("lot of %s recognised %d in %d rows, want its cost %d", c.entry.DedupeKey, net, rows, c.cost)
		}
	}
	verifyClean(t, pool)
}

// Billing's set-based chunk recognises as it draws: one chunk of many decisions across two priced lots
// and a promotional one books exactly the cost of what it used, in one statement.
func TestRevenueBillingChunkRecognises(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	createAccount(t, pool, "acct")
	adjust(t, pool, "acct", "promo", 50, db.LotTerms{Category: db.LotPromotional, Priority: 10})
	top := topupAt(t, pool, "acct", "t1", "pi_1", 300, 100, "usd")
	top2 := topupAt(t, pool, "acct", "t2", "pi_2", 300, 200, "usd")
	var batch []db.Decision
	for i := range 200 {
		batch = append(batch, db.Decision{ID: fmt.Sprintf("d%d", i), AccountID: "acct", Cost: 2, OccurredAt: time.Now()})
	}
	if _, err := db.StoreDecisions(ctx, pool, batch); err != nil {
		t.Fatal(err)
	}
	last, err := db.LastDecisionSeq(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	bill := func() {
		if _, err := dbtest.Ledger(t, pool).BillChunk(ctx, 0, last, 10_000); err != nil {
			t.Fatal(err)
		}
	}
	bill()
	// 400 used: 50 promotional (free), the first paid lot's 300 (all of its 100), then 50 of the second
	// (floor(200 * 50 / 300) = 33).
	if net, _ := recognisedOf(t, pool, "acct", lotOf(t, pool, "acct", top).ID); net != 100 {
		t.Fatalf("first lot recognised %d, want 100", net)
	}
	if net, _ := recognisedOf(t, pool, "acct", lotOf(t, pool, "acct", top2).ID); net != 33 {
		t.Fatalf("second lot recognised %d, want 33", net)
	}
	rows := count(t, pool, `SELECT count(*)::int FROM revenue_recognitions`)
	// A re-read chunk posts nothing, and so recognises nothing again.
	bill()
	if again := count(t, pool, `SELECT count(*)::int FROM revenue_recognitions`); again != rows {
		t.Fatalf("billing the chunk again wrote %d more recognition rows", again-rows)
	}
	verifyClean(t, pool)
}

// A replayed top-up, adjustment or debit posts nothing, and so writes no recognition row twice.
func TestRevenueReplaysRecogniseOnce(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	createAccount(t, pool, "acct")
	topupAt(t, pool, "acct", "t1", "pi_1", 90, 70, "usd")
	paid := db.Posting{AccountID: "acct", Kind: db.KindAdjustment, Amount: 10, DedupeKey: "adj",
		Lot: &db.LotTerms{Category: db.LotPaid, Priority: 90}, Cost: &db.Cost{Amount: 9, Currency: "usd"}}
	mustPost(t, pool, paid)
	debit := db.Posting{AccountID: "acct", Kind: db.KindUsage, Amount: -95, DedupeKey: "u1"}
	mustPost(t, pool, debit)
	before := count(t, pool, `SELECT count(*)::int FROM revenue_recognitions`)
	if before != 2 {
		t.Fatalf("%d recognition rows, want 2 (the top-up's lot and the adjustment's)", before)
	}
	for _, p := range []db.Posting{
		{AccountID: "acct", Kind: db.KindTopup, Amount: 90, DedupeKey: "t1", PaymentIntent: "pi_1", Cost: &db.Cost{Amount: 70, Currency: "usd"}},
		paid, debit,
	} {
		posted, err := post(t, pool, p)
		if err != nil || posted.New {
			t.Fatalf("replay of %s: new %t, %v", p.DedupeKey, posted.New, err)
		}
	}
	if after := count(t, pool, `SELECT count(*)::int FROM revenue_recognitions`); after != before {
		t.Fatalf("replays wrote %d recognition rows", after-before)
	}
	// The adjustment's lot: 5 of its 10 credits drawn, half of 9 recognised.
	if n := count(t, pool, `SELECT sum(amount)::int FROM revenue_recognitions`); n != 70+4 {
		t.Fatalf("recognised %d, want 74", n)
	}
	verifyClean(t, pool)
}

// Recognition rows are append-only, and a row that does not match its draw (here one inserted beside
// the real ones, which works on both backends: no trigger is disabled) is reported by verify.
func TestRevenueTamperedRecognitionIsReported(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	createAccount(t, pool, "acct")
	top := topupAt(t, pool, "acct", "t1", "pi_1", 1000, 333, "usd")
	u := use(t, pool, "acct", "u1", 300)
	verifyClean(t, pool)

	_, err := pool.Exec(ctx, `UPDATE revenue_recognitions SET amount = amount + 1`)
	if err == nil || !strings.Contains(err.Error(), "revenue recognitions are append-only") {
		t.Fatalf("UPDATE of a recognition: %v, want refused by revenue_recognitions_append_only", err)
	}
	// The draw's row again, booked a second time under another posting.
	_, err = pool.Exec(ctx, `
		INSERT INTO revenue_recognitions (account_id, lot_id, entry_id, posting_entry_id, kind, credits, drawn_after, amount, currency, created_at)
		SELECT account_id, lot_id, entry_id, $3, kind, credits, drawn_after, amount, currency, created_at
		FROM revenue_recognitions WHERE account_id = $1 AND entry_id = $2`, "acct", u.ID, top.ID)
	if err != nil {
		t.Fatal(err)
	}
	violations, err := db.Verify(ctx, pool, time.Now(), time.Hour, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var recognition, rollforward bool
	for _, v := range violations {
		recognition = recognition || v.Check == "recognition"
		rollforward = rollforward || v.Check == "rollforward"
	}
	if !recognition || !rollforward {
		t.Fatalf("verify found %v; want the tampered recognition and the broken rollforward", violations)
	}
}

// A seeded random workload on an account counted in credits (top-ups at several prices in several
// currencies) and on accounts counted in their currency: grants, paid and promotional adjustments,
// usage posted directly and billed from decisions, expiry of paid and promotional lots, voids,
// refunds, disputes and their restores. Every seed ties out to the minor unit: verify's identities
// hold (each row is its draw's, each lot has recognised what its drawn credits used of its cost, and per
// currency the rollforward closes on the open lots' unrecognised cost), no lot ever recognises more
// than its cost, and the liability report of every period between checkpoints taken along the way opens
// and closes on the unrecognised cost the lots held at its two bounds.
func TestRevenueRandomWorkloadTiesOut(t *testing.T) {
	t.Parallel()
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			revenueWorkload(t, seed)
		})
	}
}

func revenueWorkload(t *testing.T, seed uint64) {
	pool := dbtest.New(t)
	ctx := context.Background()
	l := dbtest.Ledger(t, pool)
	rng := rand.New(rand.NewPCG(seed, 34))
	type account struct{ id, currency, unit string }
	accounts := []account{{"cred", "usd", db.UnitCredits}, {"usd1", "usd", db.UnitCurrency}, {"eur1", "eur", db.UnitCurrency}}
	for _, a := range accounts {
		if _, err := l.CreateAccountIn(ctx, a.id, a.currency, a.unit, 0); err != nil {
			t.Fatal(err)
		}
	}
	type payment struct {
		account, pi string
		credits     int64
		reversed    int64
	}
	type reversal struct {
		account, key, pi, kind string
		amount                 int64
	}
	var payments []*payment
	var reversals []reversal
	var decisions []db.Decision
	n := 0
	key := func(prefix string) string { n++; return fmt.Sprintf("%s%d", prefix, n) }
	past := time.Now().Add(-time.Hour)
	checkpoints := []deferredAt{deferredNow(t, pool)}
	for i := range 300 {
		if i > 0 && i%60 == 0 {
			checkpoints = append(checkpoints, deferredNow(t, pool))
		}
		a := accounts[rng.IntN(len(accounts))]
		switch op := rng.IntN(20); {
		case op < 4: // a paid top-up: on credits at a price in any currency, else 1:1 in the account's
			credits, price, currency := 1+rng.Int64N(5000), int64(0), a.currency
			if a.unit == db.UnitCredits {
				price, currency = 1+rng.Int64N(3000), []string{"usd", "eur", "gbp"}[rng.IntN(3)]
			} else {
				price = credits
			}
			p := &payment{account: a.id, pi: key("pi_"), credits: credits}
			payments = append(payments, p)
			topupAt(t, pool, a.id, key("top"), p.pi, credits, price, currency)
		case op < 5: // a grant, or a promotional adjustment expiring soon or never
			var terms db.LotTerms
			terms.Category, terms.Priority = db.LotPromotional, rng.IntN(101)
			if rng.IntN(2) == 0 {
				terms.ExpiresAt = &past
			}
			mustPost(t, pool, db.Posting{AccountID: a.id, Kind: db.KindAdjustment, Amount: 1 + rng.Int64N(500), DedupeKey: key("promo"), Lot: &terms})
		case op < 6: // a paid adjustment naming its cost, perhaps expiring
			terms := db.LotTerms{Category: db.LotPaid, Priority: rng.IntN(101)}
			if rng.IntN(3) == 0 {
				terms.ExpiresAt = &past
			}
			mustPost(t, pool, db.Posting{AccountID: a.id, Kind: db.KindAdjustment, Amount: 1 + rng.Int64N(900), DedupeKey: key("paid"),
				Lot: &terms, Cost: &db.Cost{Amount: rng.Int64N(700), Currency: a.currency}})
		case op < 10: // usage posted directly (the API's capture or a negative adjustment)
			use(t, pool, a.id, key("use"), 1+rng.Int64N(700))
		case op < 14: // decisions, billed in chunks
			decisions = append(decisions, db.Decision{ID: key("d"), AccountID: a.id, Cost: 1 + rng.Int64N(400), OccurredAt: time.Now()})
			if rng.IntN(3) == 0 {
				billAll(t, pool, l, decisions)
				decisions = nil
			}
		case op < 16: // a refund or dispute of part of a payment
			if len(payments) == 0 {
				continue
			}
			p := payments[rng.IntN(len(payments))]
			if p.reversed == p.credits {
				continue
			}
			r := reversal{account: p.account, pi: p.pi, kind: []string{db.KindRefund, db.KindDispute}[rng.IntN(2)], amount: 1 + rng.Int64N(p.credits-p.reversed)}
			r.key = key("rev")
			p.reversed += r.amount
			mustPost(t, pool, db.Posting{AccountID: r.account, Kind: r.kind, Amount: -r.amount, DedupeKey: r.key, PaymentIntent: r.pi})
			reversals = append(reversals, r)
		case op < 17: // a restore of a reversal
			if len(reversals) == 0 {
				continue
			}
			i := rng.IntN(len(reversals))
			r := reversals[i]
			reversals = append(reversals[:i], reversals[i+1:]...)
			kind := db.KindRefundRestore
			if r.kind == db.KindDispute {
				kind = db.KindDisputeWon
			}
			mustPost(t, pool, db.Posting{AccountID: r.account, Kind: kind, Amount: r.amount, DedupeKey: key("res"), PaymentIntent: r.pi, Reverses: r.key})
		case op < 19: // the expiry pass
			if _, _, err := l.ExpireLots(ctx, 100); err != nil {
				t.Fatal(err)
			}
		default: // an operator voids an open lot
			var lot int64
			err := pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM credit_lots WHERE account_id = $1 AND closed_at IS NULL AND remaining > 0`, a.id).Scan(&lot)
			if err != nil {
				t.Fatal(err)
			}
			if lot != 0 {
				if _, err := l.VoidLot(ctx, lot); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	billAll(t, pool, l, decisions)
	if _, _, err := l.ExpireLots(ctx, 100); err != nil {
		t.Fatal(err)
	}
	verifyClean(t, pool)
	checkpoints = append(checkpoints, deferredNow(t, pool))
	for i := 1; i < len(checkpoints); i++ {
		from, to := checkpoints[i-1], checkpoints[i]
		report, err := db.LiabilityReportOf(ctx, pool, from.at, to.at)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][2]int64{}
		for _, c := range report.Currencies {
			got[c.Currency] = [2]int64{c.Line("opening_deferred").Amount, c.Line("closing_deferred").Amount}
		}
		for _, currency := range []string{"eur", "gbp", "usd"} {
			if want := [2]int64{from.cost[currency], to.cost[currency]}; got[currency] != want {
				t.Errorf("seed %d, period %d (%s to %s), %s: report opens and closes at %v, the lots held %v unrecognised",
					seed, i, from.at.Format(time.StampMicro), to.at.Format(time.StampMicro), currency, got[currency], want)
			}
		}
	}
	if n := count(t, pool, `
		SELECT count(*)::int FROM credit_lots l
		JOIN (SELECT account_id, lot_id, sum(amount) FILTER (WHERE kind <> 'restored') AS booked FROM revenue_recognitions GROUP BY 1, 2) r
		    ON r.account_id = l.account_id AND r.lot_id = l.id
		WHERE r.booked - coalesce((SELECT sum(amount) FROM revenue_recognitions x WHERE x.account_id = l.account_id AND x.lot_id = l.id AND x.kind = 'restored'), 0) > l.cost_amount`); n != 0 {
		t.Fatalf("%d lots recognised more than their cost", n)
	}
	// The workload exercised what it should.
	for _, kind := range []string{"recognised", "breakage", "refunded", "disputed", "restored"} {
		if count(t, pool, `SELECT count(*)::int FROM revenue_recognitions WHERE kind = $1`, kind) == 0 {
			t.Errorf("seed %d: no %s row", seed, kind)
		}
	}
	if count(t, pool, `SELECT count(DISTINCT currency)::int FROM revenue_recognitions`) < 2 {
		t.Errorf("seed %d: recognitions in fewer than two currencies", seed)
	}
}

// deferredAt is the unrecognised cost of every priced lot per currency at an instant of the database's
// clock, read straight from the lots and their recognition rows (not through the report).
type deferredAt struct {
	at   time.Time
	cost map[string]int64
}

func deferredNow(t *testing.T, pool *pgxpool.Pool) deferredAt {
	t.Helper()
	ctx := context.Background()
	d := deferredAt{cost: map[string]int64{}}
	// One statement, one snapshot: the instant and the lots as they stand at it. Rows are dated by the
	// transaction that wrote them, which began before this statement did.
	rows, err := pool.Query(ctx, `
		SELECT clock_timestamp(), coalesce(l.cost_currency, ''),
		       coalesce(sum(l.cost_amount - coalesce(r.net, 0)), 0)::bigint
		FROM (SELECT 1) one
		LEFT JOIN credit_lots l ON l.cost_amount > 0
		LEFT JOIN (SELECT account_id, lot_id, sum(CASE WHEN kind = 'restored' THEN -amount ELSE amount END) AS net
		           FROM revenue_recognitions GROUP BY 1, 2) r ON r.account_id = l.account_id AND r.lot_id = l.id
		GROUP BY 2`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var currency string
		var cost int64
		if err := rows.Scan(&d.at, &currency, &cost); err != nil {
			t.Fatal(err)
		}
		if currency != "" {
			d.cost[currency] = cost
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return d
}

// billAll stores the decisions and bills every stored decision not billed yet, in chunks.
func billAll(t *testing.T, pool *pgxpool.Pool, l *db.Ledger, decisions []db.Decision) {
	t.Helper()
	ctx := context.Background()
	if len(decisions) > 0 {
		if _, err := db.StoreDecisions(ctx, pool, decisions); err != nil {
			t.Fatal(err)
		}
	}
	last, err := db.LastDecisionSeq(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	for after := int64(0); after < last; after += 50 {
		if _, err := l.BillChunk(ctx, after, min(after+50, last), 50); err != nil && !errors.Is(err, db.ErrNotFound) {
			t.Fatal(err)
		}
	}
}
