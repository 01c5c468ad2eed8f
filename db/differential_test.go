package db_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

// One way to post (SPEC §21): every fast path is a different way to plan rows, never a different way to
// write them, and these tests hold each one equal to the general path. A seeded random workload runs
// through the general path on one database and through the fast path on another; the two ledgers must
// be the same entry for entry (kind, amount, key, payment, seq, balance_after, the lot an entry takes and
// the reversal it undoes, who spent and on what), lot for lot, draw for draw, and every caller must get the same answer. A
// failing seed is printed: rerun it with -run and the seed in the subtest's name.

// differentialSeeds is how many workloads each test runs.
const differentialSeeds = 6

// answer is what a caller was told, in a form two paths can compare.
func answer(p db.Posted, err error) string {
	for _, s := range []error{db.ErrDedupeConflict, db.ErrInsufficientBalance, db.ErrAccountNotFound, db.ErrInvalidAmount, db.ErrOutOfRange} {
		if errors.Is(err, s) {
			return "refused: " + s.Error()
		}
	}
	if err != nil {
		return "error: " + err.Error()
	}
	e := p.Entry
	return fmt.Sprintf("new=%t %s %s %d key=%q seq=%d balance_after=%d", p.New, e.AccountID, e.Kind, e.Amount, e.DedupeKey, e.Seq, e.BalanceAfter)
}

// postings is a random workload on one account: credits (some making lots past their expiry, some with
// their own lot terms), debits with and without the no-overdraw rule (some naming who spent and on what),
// refunds and disputes of its payments, their restores, exact replays, keys reused with another amount, a few postings without a key
// and a few on an account that does not exist.
func postings(rng *rand.Rand, account string, n int) []db.Posting {
	var (
		out        []db.Posting
		payments   []db.Posting     // top-ups, by payment
		refundable map[string]int64 = map[string]int64{}
		reversals  []db.Posting     // refunds and disputes not restored yet
	)
	past := time.Now().Add(-time.Minute)
	for i := range n {
		key := fmt.Sprintf("k%d", i)
		var p db.Posting
		switch r := rng.IntN(100); {
		case r < 18:
			p = db.Posting{AccountID: account, Kind: db.KindTopup, Amount: 50 + rng.Int64N(450), DedupeKey: "stripe:evt_" + key,
				PaymentIntent: "pi_" + key}
			if rng.IntN(4) == 0 {
				p.Lot = &db.LotTerms{Category: db.LotPaid, Priority: db.DefaultLotPriority, ExpiresAt: &past}
			}
			payments = append(payments, p)
			refundable[p.PaymentIntent] = p.Amount
		case r < 30:
			terms := db.LotTerms{Category: []string{db.LotPaid, db.LotPromotional}[rng.IntN(2)], Priority: rng.IntN(101)}
			if rng.IntN(3) == 0 {
				later := time.Now().Add(time.Duration(1+rng.IntN(48)) * time.Hour)
				terms.ExpiresAt = &later
			}
			p = db.Posting{AccountID: account, Kind: db.KindAdjustment, Amount: 1 + rng.Int64N(300), DedupeKey: "api:" + key,
				NoOverdraw: true, Lot: &terms}
		case r < 48:
			p = db.Posting{AccountID: account, Kind: db.KindAdjustment, Amount: -(1 + rng.Int64N(300)), DedupeKey: "api:" + key, NoOverdraw: true}
			p.Subject, p.Feature = spender(rng)
		case r < 60:
			p = db.Posting{AccountID: account, Kind: db.KindUsage, Amount: -(1 + rng.Int64N(200)), DedupeKey: "decision:" + key}
			p.Subject, p.Feature = spender(rng)
		case r < 72 && len(payments) > 0 && refundable[payments[len(payments)-1].PaymentIntent] > 0:
			// Reversals of a payment never exceed its credit (verify's rule): the latest one's rest.
			paid := payments[len(payments)-1]
			kind, prefix := db.KindRefund, "stripe:refund:re_"
			if rng.IntN(3) == 0 {
				kind, prefix = db.KindDispute, "stripe:dispute:dp_"
			}
			amount := 1 + rng.Int64N(refundable[paid.PaymentIntent])
			refundable[paid.PaymentIntent] -= amount
			p = db.Posting{AccountID: account, Kind: kind, Amount: -amount, DedupeKey: prefix + key, PaymentIntent: paid.PaymentIntent}
			reversals = append(reversals, p)
		case r < 80 && len(reversals) > 0:
			k := rng.IntN(len(reversals))
			rev := reversals[k]
			reversals = append(reversals[:k], reversals[k+1:]...)
			kind, restoreKey := db.KindRefundRestore, strings.Replace(rev.DedupeKey, "stripe:refund:", "stripe:refund-failed:", 1)
			if rev.Kind == db.KindDispute {
				kind, restoreKey = db.KindDisputeWon, strings.Replace(rev.DedupeKey, "stripe:dispute:", "stripe:dispute-won:", 1)
			}
			p = db.Posting{AccountID: account, Kind: kind, Amount: -rev.Amount, DedupeKey: restoreKey,
				PaymentIntent: rev.PaymentIntent, Reverses: rev.DedupeKey}
			refundable[rev.PaymentIntent] += rev.Amount
		case r < 88 && len(out) > 0:
			p = out[rng.IntN(len(out))] // an exact replay
		case r < 92 && len(out) > 0:
			p = out[rng.IntN(len(out))] // the key reused with another amount
			p.Amount += 1
			if p.Amount == 0 {
				p.Amount = 2
			}
		case r < 96:
			p = db.Posting{AccountID: account, Kind: db.KindAdjustment, Amount: 1 + rng.Int64N(50)} // no key
		default:
			p = db.Posting{AccountID: "acct_missing", Kind: db.KindAdjustment, Amount: 5, DedupeKey: "api:missing:" + key}
		}
		out = append(out, p)
	}
	return out
}

// spender is a random subject and feature, each sometimes none.
func spender(rng *rand.Rand) (subject, feature string) {
	subjects := []string{"", "agent-1", "alice@example.com"}
	features := []string{"", "chat", "search"}
	return subjects[rng.IntN(len(subjects))], features[rng.IntN(len(features))]
}

// postOneByOne is the general path: each posting in a transaction of its own.
func postOneByOne(t *testing.T, l *db.Ledger, ps []db.Posting) []string {
	t.Helper()
	answers := make([]string, len(ps))
	for i, p := range ps {
		var out db.Posted
		err := db.InTx(context.Background(), l.Pool(), func(tx db.Tx) error {
			var err error
			out, err = l.Post(context.Background(), tx, p)
			return err
		})
		answers[i] = answer(out, err)
	}
	return answers
}

// sameAnswers fails with the first posting whose callers were told different things.
func sameAnswers(t *testing.T, ps []db.Posting, general, fast []string) {
	t.Helper()
	for i := range general {
		if general[i] != fast[i] {
			t.Fatalf("posting %d (%+v):\n general: %s\n    fast: %s", i, ps[i], general[i], fast[i])
		}
	}
}

// Group commit: the workload in groups of random sizes (each planned on the balance its previous group
// left, as while an account stays busy) gives what it gives posted one transaction each.
func TestDifferentialGroupCommit(t *testing.T) {
	t.Parallel()
	for seed := range uint64(differentialSeeds) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 0x0ea7))
			ps := postings(rng, "acct", 150)
			var groups [][]db.Posting
			for rest := ps; len(rest) > 0; {
				n := min(len(rest), 1+rng.IntN(12))
				groups, rest = append(groups, rest[:n]), rest[n:]
			}

			general, fast := dbtest.New(t), dbtest.New(t)
			createAccount(t, general, "acct")
			createAccount(t, fast, "acct")
			want := postOneByOne(t, dbtest.Ledger(t, general), ps)
			outs, errs := db.PostInGroups(dbtest.Ledger(t, fast), "acct", groups)
			got := make([]string, len(outs))
			for i := range outs {
				got[i] = answer(outs[i], errs[i])
			}
			sameAnswers(t, ps, want, got)
			dbtest.SameLedgers(t, dbtest.LedgerState(t, general), dbtest.LedgerState(t, fast))
			verifyClean(t, fast)
		})
	}
}

// checkoutWork is a random set of first deliveries of paid Checkout Sessions: sessions of orders the API
// created (some of another amount), of none, on accounts that exist or not, the same event twice, a
// second event of a session, a payment that already paid another order, and payments that refunds
// parked before them wait for.
func checkoutWork(t *testing.T, rng *rand.Rand, pools ...*pgxpool.Pool) []db.CheckoutPayment {
	t.Helper()
	ctx := context.Background()
	accounts := []string{"acct_a", "acct_b", "acct_c"}
	for _, pool := range pools {
		for _, a := range accounts {
			createAccount(t, pool, a)
		}
	}
	var out []db.CheckoutPayment
	for i := range 60 {
		account := accounts[rng.IntN(len(accounts))]
		if rng.IntN(12) == 0 {
			account = "acct_missing"
		}
		amount := 100 + rng.Int64N(900)
		session, pi, event := fmt.Sprintf("cs_%d", i), fmt.Sprintf("pi_%d", i), fmt.Sprintf("evt_%d", i)
		switch r := rng.IntN(10); {
		case r < 3: // an order the API created, pending for this amount (or another)
			ordered := amount
			if rng.IntN(4) == 0 {
				ordered++
			}
			for _, pool := range pools {
				if _, _, err := db.InsertPendingTopup(ctx, pool, db.Topup{ID: "top_" + session, AccountID: account, Amount: ordered, Currency: "usd"}); err != nil && !errors.Is(err, db.ErrAccountNotFound) {
					t.Fatal(err)
				}
				if _, err := db.SetTopupSession(ctx, pool, "top_"+session, session, "https://checkout.example/"+session); err != nil && !errors.Is(err, db.ErrNotFound) {
					t.Fatal(err)
				}
			}
		case r < 4 && len(out) > 0: // the same event again
			out = append(out, out[rng.IntN(len(out))])
			continue
		case r < 5 && len(out) > 0: // another event of a session already paid
			p := out[rng.IntN(len(out))]
			session, pi, account, amount = p.Order.SessionID, p.Order.PaymentIntent, p.Order.AccountID, p.Order.Amount
		case r < 6 && len(out) > 0: // a payment that paid another session
			pi = out[rng.IntN(len(out))].Order.PaymentIntent
		case r < 7: // a refund parked before its payment
			for _, pool := range pools {
				if _, err := db.RecordEvent(ctx, pool, db.Event{ID: "evt_refund_" + pi, Type: "refund.created", APIVersion: "2024-06-20",
					Created: time.Now(), Payload: []byte(`{}`), Outcome: "parked", ParkedReason: "unknown_payment", PaymentIntent: pi}); err != nil {
					t.Fatal(err)
				}
			}
		}
		out = append(out, db.CheckoutPayment{
			Event: db.Event{ID: event, Type: "checkout.session.completed", APIVersion: "2024-06-20", Created: time.Now(),
				Payload: []byte(`{}`), Outcome: "applied", PaymentIntent: pi},
			Order:  db.Topup{ID: session, AccountID: account, SessionID: session, PaymentIntent: pi, Amount: amount, Currency: "usd"},
			Credit: db.Posting{Kind: db.KindTopup, Description: "Stripe Checkout " + session, DedupeKey: "stripe:" + event},
		})
	}
	return out
}

func payAnswer(paid db.CheckoutPaid, p db.Posted, err error) string {
	return fmt.Sprintf("paid=%d %s", paid, answer(p, err))
}

// The webhook's group of Checkout Sessions: the deliveries in groups of random sizes give what each
// gives in a transaction of its own (PayCheckout's happy path, or nothing when it leaves the delivery to
// the general path).
func TestDifferentialCheckoutGroups(t *testing.T) {
	t.Parallel()
	for seed := range uint64(differentialSeeds) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 0xc0c0))
			general, fast := dbtest.New(t), dbtest.New(t)
			work := checkoutWork(t, rng, general, fast)
			var groups [][]db.CheckoutPayment
			for rest := work; len(rest) > 0; {
				n := min(len(rest), 1+rng.IntN(16))
				groups, rest = append(groups, rest[:n]), rest[n:]
			}

			alone := dbtest.Ledger(t, general)
			want := make([]string, len(work))
			for i, p := range work {
				want[i] = payAnswer(alone.PayCheckout(context.Background(), p))
			}
			paid, outs, errs := db.PayInGroups(dbtest.Ledger(t, fast, db.LedgerConfig{GroupCheckouts: true}), groups)
			for i := range work {
				if got := payAnswer(paid[i], outs[i], errs[i]); got != want[i] {
					t.Fatalf("delivery %d (%s of %s):\n general: %s\n    fast: %s", i, work[i].Event.ID, work[i].Order.SessionID, want[i], got)
				}
			}
			dbtest.SameLedgers(t, dbtest.LedgerState(t, general), dbtest.LedgerState(t, fast))
		})
	}
}

// Set-based billing and expiry: a chunk's usage planned from the decisions in one statement, and the
// expiry pass's entries planned from the lots in one, give what the same entries give posted one by one
// (billing: in decision seq order per account, each entry with its decision's subject and feature, a
// decision whose hold the API captured first paying only its cost beyond the capture; expiry: every open lot past its expiry, in lot id order per account).
func TestDifferentialBillingAndExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for seed := range uint64(differentialSeeds) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 0xb111))
			general, fast := dbtest.New(t), dbtest.New(t)
			accounts := []string{"acct_a", "acct_b", "acct_c"}
			past, later := time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
			var decisions []db.Decision
			captured := map[string]int64{} // account/hold → what the API captured
			for _, pool := range []*pgxpool.Pool{general, fast} {
				l := dbtest.Ledger(t, pool)
				for i, a := range accounts {
					createAccount(t, pool, a)
					// Lots that expired, one that has not, a debt on the last account.
					for k, expires := range []*time.Time{&past, &past, &later, nil} {
						if i == 2 && k > 0 {
							break
						}
						mustPost(t, pool, db.Posting{AccountID: a, Kind: db.KindAdjustment, Amount: 100 + int64(30*k), DedupeKey: fmt.Sprintf("lot:%s:%d", a, k),
							Lot: &db.LotTerms{Category: db.LotPromotional, Priority: 50 - 10*k, ExpiresAt: expires}})
					}
					for h := range 3 {
						hold := fmt.Sprintf("h%d", h)
						if _, err := db.AuthoriseHold(ctx, pool, a, db.HoldRequest{ID: hold, Amount: 40, ExpiresIn: time.Hour}); err != nil {
							t.Fatal(err)
						}
						if _, err := l.CaptureHold(ctx, a, hold, int64(10+10*h)); err != nil {
							t.Fatal(err)
						}
						captured[a+"/"+hold] = int64(10 + 10*h)
					}
				}
			}
			for i := range 300 {
				d := db.Decision{ID: fmt.Sprintf("d%d", i), AccountID: accounts[rng.IntN(len(accounts))], Cost: 1 + rng.Int64N(60), OccurredAt: time.Now()}
				if rng.IntN(10) == 0 {
					d.AccountID = "acct_missing"
				}
				if rng.IntN(5) == 0 {
					d.HoldID = fmt.Sprintf("h%d", rng.IntN(3))
				}
				d.Subject, d.Feature = spender(rng)
				decisions = append(decisions, d)
			}
			for _, pool := range []*pgxpool.Pool{general, fast} {
				if _, err := db.StoreDecisions(ctx, pool, decisions); err != nil {
					t.Fatal(err)
				}
			}

			// General: one posting per decision, in seq order, then one per lot past its expiry.
			for _, d := range decisions {
				if d.AccountID == "acct_missing" {
					continue
				}
				due := d.Cost - min(d.Cost, captured[d.AccountID+"/"+d.HoldID])
				if due > 0 {
					mustPost(t, general, db.Posting{AccountID: d.AccountID, Kind: db.KindUsage, Amount: -due, Description: "decision " + d.ID, DedupeKey: "decision:" + d.ID,
						Subject: d.Subject, Feature: d.Feature})
				}
			}
			rows, err := general.Query(ctx, `SELECT account_id, id, remaining FROM credit_lots
				WHERE closed_at IS NULL AND expires_at <= now() AND remaining > 0 ORDER BY account_id, id`)
			if err != nil {
				t.Fatal(err)
			}
			var expiring []db.Posting
			for rows.Next() {
				var p db.Posting
				if err := rows.Scan(&p.AccountID, &p.LotID, &p.Amount); err != nil {
					t.Fatal(err)
				}
				p.Kind, p.Amount, p.Description, p.DedupeKey = db.KindExpiry, -p.Amount, fmt.Sprintf("lot %d expired", p.LotID), db.ExpiryKey(p.LotID)
				expiring = append(expiring, p)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			for _, p := range expiring {
				mustPost(t, general, p)
			}
			if _, err := general.Exec(ctx, `UPDATE credit_lots SET closed_at = now() WHERE closed_at IS NULL AND expires_at <= now() AND remaining = 0`); err != nil {
				t.Fatal(err)
			}

			// Fast: billing in chunks of random sizes, then the expiry pass.
			fl := dbtest.Ledger(t, fast)
			last, err := db.LastDecisionSeq(ctx, fast)
			if err != nil {
				t.Fatal(err)
			}
			for after := int64(0); after < last; {
				chunk, err := fl.BillChunk(ctx, after, last, 1+rng.IntN(120))
				if err != nil {
					t.Fatal(err)
				}
				after = chunk.UptoSeq
			}
			if _, _, err := fl.ExpireLots(ctx, 100); err != nil {
				t.Fatal(err)
			}
			dbtest.SameLedgers(t, dbtest.LedgerState(t, general), dbtest.LedgerState(t, fast))
			verifyClean(t, fast)
		})
	}
}

// Grouped authorisations of a tree's members (SPEC §18): a random workload of holds on an
// organisation, its teams and their members (some past what a member, its team or the whole tree has,
// replays, ids reused with another amount, an account that does not exist), in groups of random sizes
// mixing the tree's accounts, gives what each gives authorised in a transaction of its own, in the same
// order: the same answers, the same holds with what each level reserved, the same held on every account.
func TestDifferentialHoldGroupsOfATree(t *testing.T) {
	t.Parallel()
	tree := [][3]string{{"org", "", "900"}, {"team_a", "org", "200"}, {"team_b", "org", "0"},
		{"m1", "team_a", "60"}, {"m2", "team_a", "0"}, {"m3", "team_b", "40"}}
	accounts := []string{"org", "team_a", "team_b", "m1", "m2", "m3", "m3", "m2", "m1", "acct_missing"}
	for seed := range uint64(differentialSeeds) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 0x4a11))
			var on []string
			var reqs []db.HoldRequest
			for i := range 120 {
				account, req := accounts[rng.IntN(len(accounts))], db.HoldRequest{ID: fmt.Sprintf("h%d", i), Amount: 1 + rng.Int64N(90), ExpiresIn: time.Hour}
				switch r := rng.IntN(10); {
				case r == 0 && len(reqs) > 0: // an exact replay
					k := rng.IntN(len(reqs))
					account, req = on[k], reqs[k]
				case r == 1 && len(reqs) > 0: // the id reused with another amount
					k := rng.IntN(len(reqs))
					account, req = on[k], reqs[k]
					req.Amount++
				}
				on, reqs = append(on, account), append(reqs, req)
			}

			general, fast := dbtest.New(t), dbtest.New(t)
			createTree(t, dbtest.Ledger(t, general), tree...)
			createTree(t, dbtest.Ledger(t, fast), tree...)
			ctx := context.Background()
			want := make([]string, len(reqs))
			for i := range reqs {
				out, err := db.AuthoriseHold(ctx, general, on[i], reqs[i])
				want[i] = holdAnswer(out, err)
			}
			l := dbtest.Ledger(t, fast)
			for start := 0; start < len(reqs); {
				n := min(len(reqs)-start, 1+rng.IntN(16))
				outs, errs := db.AuthoriseAsOneGroup(ctx, l, on[start:start+n], reqs[start:start+n])
				for k := range outs {
					if got := holdAnswer(outs[k], errs[k]); got != want[start+k] {
						t.Fatalf("authorisation %d (%s %+v):\n general: %s\n    fast: %s", start+k, on[start+k], reqs[start+k], want[start+k], got)
					}
				}
				start += n
			}
			dbtest.SameLedgers(t, dbtest.LedgerState(t, general), dbtest.LedgerState(t, fast))
			for _, q := range []string{
				`SELECT coalesce(string_agg(account_id || ':' || id || ':' || amount || ':' || pooled, ' ' ORDER BY account_id, id), '') FROM holds`,
				`SELECT coalesce(string_agg(account_id || ':' || hold_id || ':' || pool_id || ':' || amount, ' ' ORDER BY account_id, hold_id, pool_id), '') FROM hold_reservations`,
			} {
				var g, f string
				if err := general.QueryRow(ctx, q).Scan(&g); err != nil {
					t.Fatal(err)
				}
				if err := fast.QueryRow(ctx, q).Scan(&f); err != nil {
					t.Fatal(err)
				}
				if g != f {
					t.Fatalf("%s\n general: %s\n    fast: %s", q, g, f)
				}
			}
			verifyClean(t, fast)
		})
	}
}

// holdAnswer is what an authorisation's caller was told, in a form two paths can compare.
func holdAnswer(out db.HoldAuthorised, err error) string {
	for _, s := range []error{db.ErrDedupeConflict, db.ErrInsufficientBalance, db.ErrAccountNotFound, db.ErrLimitExceeded} {
		if errors.Is(err, s) {
			return "refused: " + s.Error()
		}
	}
	if err != nil {
		return "error: " + err.Error()
	}
	h := out.Hold
	return fmt.Sprintf("created=%t %s %s %d pooled=%d %s", out.Created, h.AccountID, h.ID, h.Amount, h.Pooled, h.Status)
}
