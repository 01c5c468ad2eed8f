package reconcile_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/reconcile"
)

// seedAccounts creates accounts acct_1 … acct_n, set-based.
func seedAccounts(tb testing.TB, pool *pgxpool.Pool, n int) {
	tb.Helper()
	_, err := pool.Exec(context.Background(),
		`INSERT INTO accounts (id, currency) SELECT 'acct_' || g, 'usd' FROM generate_series(1, $1::int) g`, n)
	if err != nil {
		tb.Fatalf("seed accounts: %v", err)
	}
}

// seedDecisions stores decisions dec_{from} … dec_{from+n-1}, spread round-robin over acct_1 …
// acct_{accounts}, costing 1 to 7, through the intake's statement in batches of 10,000.
func seedDecisions(tb testing.TB, pool *pgxpool.Pool, from, n, accounts int) {
	tb.Helper()
	var batch []db.Decision
	for g := from; g < from+n; g++ {
		batch = append(batch, db.Decision{ID: fmt.Sprintf("dec_%d", g), AccountID: fmt.Sprintf("acct_%d", g%accounts+1), Cost: int64(g%7 + 1)})
		if len(batch) == 10_000 || g == from+n-1 {
			store(tb, pool, batch...)
			batch = batch[:0]
		}
	}
}

// store stores decisions as the intake does (db.StoreDecisions: on Citus, each id claimed across
// accounts), in q, failing unless every one is new.
func store(tb testing.TB, q db.Beginner, decisions ...db.Decision) {
	tb.Helper()
	for i := range decisions {
		if decisions[i].OccurredAt.IsZero() {
			decisions[i].OccurredAt = time.Now()
		}
	}
	stored, err := db.StoreDecisions(context.Background(), q, decisions)
	if err != nil || stored.Accepted != len(decisions) {
		tb.Fatalf("store %d decisions: %+v %v", len(decisions), stored, err)
	}
}

// assertBilledOnce checks the money: every stored decision has exactly one usage entry of -cost on
// its account under decision:{id}, no other usage entry exists, and every balance is exact.
func assertBilledOnce(t *testing.T, pool *pgxpool.Pool, want int64) {
	t.Helper()
	ctx := context.Background()
	var decisions, matched, usage int64
	err := pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM decisions),
		       (SELECT count(*) FROM decisions d JOIN ledger l ON l.dedupe_key = 'decision:' || d.id
		         WHERE l.kind = 'usage' AND l.amount = -d.cost AND l.account_id = d.account_id),
		       (SELECT count(*) FROM ledger WHERE kind = 'usage')`).Scan(&decisions, &matched, &usage)
	if err != nil {
		t.Fatal(err)
	}
	if decisions != want || matched != want || usage != want {
		t.Fatalf("decisions %d, billed as expected %d, usage entries %d; want %d of each", decisions, matched, usage, want)
	}
	var wrong int64
	err = pool.QueryRow(ctx, `
		SELECT count(*) FROM accounts a
		LEFT JOIN (SELECT account_id, sum(cost) AS cost FROM decisions GROUP BY account_id) d ON d.account_id = a.id
		WHERE a.balance <> -coalesce(d.cost, 0)`).Scan(&wrong)
	if err != nil {
		t.Fatal(err)
	}
	if wrong != 0 {
		t.Fatalf("%d accounts' balance is not minus the cost of their decisions", wrong)
	}
	violations, err := db.Verify(ctx, pool, time.Now(), time.Hour, time.Hour)
	if err != nil || len(violations) > 0 {
		t.Fatalf("verify: %v %v", violations, err)
	}
}

// countingLedger counts the entries handed to OnPosted, as notifications would see them.
func countingLedger(t *testing.T, pool *db.Pool, n *atomic.Int64) *db.Ledger {
	return dbtest.Ledger(t, pool, db.LedgerConfig{OnPosted: func(_ context.Context, _ pgx.Tx, posted []db.Entry) error {
		for _, p := range posted {
			if p.Kind != db.KindUsage || p.DedupeKey == "" {
				panic("OnPosted got an entry that is not a usage entry")
			}
		}
		n.Add(int64(len(posted)))
		return nil
	}})
}

func TestBillingBillsEveryDecisionOnceAndRereadPostsNothing(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	seedAccounts(t, pool, 1000)
	seedDecisions(t, pool, 1, 100_000, 1000)
	var notified atomic.Int64
	r := reconcile.New(reconcile.Deps{Pool: pool, Ledger: countingLedger(t, pool, &notified)}, reconcile.Options{})
	ctx := context.Background()

	first, err := r.Bill(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if first.Read != 100_000 || first.Billed != 100_000 || first.Waiting != 0 {
		t.Fatalf("first pass: %+v", first)
	}
	var totalCost int64
	if err := pool.QueryRow(ctx, `SELECT sum(cost) FROM decisions`).Scan(&totalCost); err != nil {
		t.Fatal(err)
	}
	if first.Amount != -totalCost || notified.Load() != 100_000 {
		t.Fatalf("first pass amount %d (want %d), notified %d", first.Amount, -totalCost, notified.Load())
	}
	assertBilledOnce(t, pool, 100_000)

	second, err := r.Bill(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if second.Read != 100_000 || second.Billed != 0 || second.Amount != 0 || notified.Load() != 100_000 {
		t.Fatalf("re-read pass: %+v, notified %d", second, notified.Load())
	}
	assertBilledOnce(t, pool, 100_000)
}

// The billing statement's chained CTEs are estimated at up to 10^26 rows, past jit_above_cost: with
// JIT, PostgreSQL compiles each chunk's statement for 2–3 s, longer than it runs. The pool db.Open
// returns, the service's and every test's, plans it without. (One server only: docs/scaling.md says
// why not on Citus.)
func TestBillingStatementIsPlannedWithoutJIT(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	seedAccounts(t, pool, 1000)
	seedDecisions(t, pool, 1, 10_000, 1000)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `ANALYZE decisions`); err != nil {
		t.Fatal(err)
	}
	var ids, parents []string
	var depths []int32
	var available []int64
	for i := 1; i <= 1000; i++ {
		ids, parents = append(ids, fmt.Sprintf("acct_%d", i)), append(parents, "")
		depths, available = append(depths, 0), append(available, 0)
	}
	args := pgx.NamedArgs{
		"after_seq": 0, "upto_seq": 10_000, "account_ids": ids,
		"tree_ids": ids, "tree_parents": parents, "tree_depths": depths, "tree_available": available,
	}
	plan := func(tx pgx.Tx) string {
		t.Helper()
		rows, err := tx.Query(ctx, "EXPLAIN "+billingQueries(t)["LedgerAppendForDecisions"], args)
		lines, err := pgx.CollectRows(mustQuery(rows, err), pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(lines, "\n")
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// The hazard is real: the same statement, with jit on, is compiled.
		if _, err := tx.Exec(ctx, `SET LOCAL jit = on`); err != nil {
			return err
		}
		if p := plan(tx); !strings.Contains(p, "JIT:") {
			t.Errorf("with jit on, the billing statement is not compiled; this test no longer shows why jit is off:\n%s", p)
		}
		if _, err := tx.Exec(ctx, `RESET jit`); err != nil {
			return err
		}
		var jit string
		if err := tx.QueryRow(ctx, `SHOW jit`).Scan(&jit); err != nil {
			return err
		}
		if p := plan(tx); jit != "off" || strings.Contains(p, "JIT:") {
			t.Errorf("the pool's sessions run with jit %s and compile the billing statement:\n%s", jit, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Billing finds the decisions billed before by one probe of the dedupe index each, even when ANALYZE
// read a young ledger of one entry per account: without the ledger's n_distinct on account_id, the planner
// probed every entry of the decision's account instead, a scan that the pass itself lengthens.
func TestBillingProbesEachDecisionByItsKey(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	seedAccounts(t, pool, 1000)
	seedDecisions(t, pool, 1, 10_000, 1000)
	seedLots(t, pool, 1, 70)
	ctx := context.Background()
	probe := regexp.MustCompile(`Index (?:Only )?Scan using (\S+) on ledger\S* l\b`)
	indexOfProbe := func(tx pgx.Tx) string {
		t.Helper()
		if _, err := tx.Exec(ctx, `ANALYZE ledger, decisions`); err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctx, "EXPLAIN "+billingQueries(t)["DecisionsUnbilledByAccount"],
			pgx.NamedArgs{"after_seq": 0, "upto_seq": 10_000})
		lines, err := pgx.CollectRows(mustQuery(rows, err), pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		plan := strings.Join(lines, "\n")
		m := probe.FindStringSubmatch(plan)
		if m == nil {
			t.Fatalf("no index probe of the ledger in the plan:\n%s", plan)
		}
		return m[1]
	}
	// One transaction, rolled back: the estimate is reset in it alone.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if index := indexOfProbe(tx); !strings.Contains(index, "dedupe_idx") {
		t.Errorf("billing probes a decision's entry through %s, not the dedupe index", index)
	}
	// The hazard is real: with ANALYZE's own estimate of this ledger, the probe reads the account's.
	if _, err := tx.Exec(ctx, `ALTER TABLE ledger ALTER COLUMN account_id RESET (n_distinct)`); err != nil {
		t.Fatal(err)
	}
	if index := indexOfProbe(tx); strings.Contains(index, "dedupe_idx") {
		t.Errorf("with ANALYZE's estimate the probe keeps %s; this test no longer shows why the estimate is set", index)
	}
}

func TestBillingTwoReconcilersAtOnceBillEachDecisionOnce(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	seedAccounts(t, pool, 200)
	seedDecisions(t, pool, 1, 50_000, 200)
	var notified atomic.Int64
	ledger := countingLedger(t, pool, &notified)
	// Different chunk sizes, so the two passes' chunks overlap at shifting boundaries.
	reconcilers := []*reconcile.Reconciler{
		reconcile.New(reconcile.Deps{Pool: pool, Ledger: ledger}, reconcile.Options{ChunkSize: 2000}),
		reconcile.New(reconcile.Deps{Pool: pool, Ledger: ledger}, reconcile.Options{ChunkSize: 3000}),
	}

	start := make(chan struct{})
	reports := make([]reconcile.BillReport, len(reconcilers))
	errs := make([]error, len(reconcilers))
	var wg sync.WaitGroup
	for i, r := range reconcilers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			reports[i], errs[i] = r.Bill(context.Background(), 0)
		}()
	}
	close(start)
	wg.Wait()

	for i, err := range errs {
		if err != nil {
			t.Fatalf("reconciler %d: %v", i, err)
		}
	}
	if billed := reports[0].Billed + reports[1].Billed; billed != 50_000 || notified.Load() != 50_000 {
		t.Fatalf("billed %d + %d, notified %d; want 50000 in all", reports[0].Billed, reports[1].Billed, notified.Load())
	}
	assertBilledOnce(t, pool, 50_000)
}

func TestBillingWaitsForAnAccountThenBillsItOnALaterPass(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	seedAccounts(t, pool, 1)
	store(t, pool, db.Decision{ID: "dec_early", AccountID: "acct_late", Cost: 40})
	seedDecisions(t, pool, 1, 30, 1)
	// A margin of one seq: only the cursor staying below the waiting decision makes the next,
	// incremental pass read it again.
	r := reconcile.New(reconcile.Deps{Pool: pool, Ledger: dbtest.Ledger(t, pool)}, reconcile.Options{ChunkSize: 10, RescanMargin: 1})

	first, err := r.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first.Bill.Billed != 30 || first.Bill.Waiting != 1 || len(first.Bill.WaitingAccounts) != 1 || first.Bill.WaitingAccounts[0] != "acct_late" {
		t.Fatalf("first pass: %+v", first.Bill)
	}

	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_late", "usd", 0); err != nil {
		t.Fatal(err)
	}
	seedDecisions(t, pool, 31, 30, 1)
	second, err := r.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if second.Full || second.Bill.Billed != 31 || second.Bill.Waiting != 0 {
		t.Fatalf("second pass (incremental): full=%v %+v", second.Full, second.Bill)
	}
	late, err := db.GetAccount(ctx, pool, "acct_late")
	if err != nil || late.Balance != -40 {
		t.Fatalf("acct_late: %+v %v; want balance -40", late, err)
	}
	assertBilledOnce(t, pool, 61)
}

func TestBillingCatchesADecisionCommittedBelowTheCursor(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	seedAccounts(t, pool, 1)
	r := reconcile.New(reconcile.Deps{Pool: pool, Ledger: dbtest.Ledger(t, pool)}, reconcile.Options{})
	if _, err := r.Pass(ctx); err != nil { // the first, full pass; later ones start from the cursor
		t.Fatal(err)
	}

	// dec_slow takes its seq first but commits after dec_fast, and after a pass already moved the
	// cursor past it.
	slow, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Rollback(ctx)
	store(t, slow, db.Decision{ID: "dec_slow", AccountID: "acct_1", Cost: 5})
	store(t, pool, db.Decision{ID: "dec_fast", AccountID: "acct_1", Cost: 3})
	if rep, err := r.Pass(ctx); err != nil || rep.Bill.Billed != 1 {
		t.Fatalf("pass before the late commit: %+v %v", rep.Bill, err)
	}
	if err := slow.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	rep, err := r.Pass(ctx)
	if err != nil || rep.Full || rep.Bill.Billed != 1 {
		t.Fatalf("pass after the late commit: full=%v %+v %v", rep.Full, rep.Bill, err)
	}
	assertBilledOnce(t, pool, 2)
}

// TestBillingLeavesOutAnAccountBeyondABigint: 10,000 decisions of 10^15 on one account (10^19 in all,
// beyond a bigint) and one decision of 5 on another, in one chunk: the other account is billed, the
// overflowing one is left unbilled and reported (pass report, metric, verify), every pass after.
func TestBillingLeavesOutAnAccountBeyondABigint(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	seedAccounts(t, pool, 2)
	huge := make([]db.Decision, 10_000)
	for g := range huge {
		huge[g] = db.Decision{ID: fmt.Sprintf("dec_huge_%d", g+1), AccountID: "acct_1", Cost: 1_000_000_000_000_000}
	}
	store(t, pool, huge...)
	store(t, pool, db.Decision{ID: "dec_small", AccountID: "acct_2", Cost: 5})
	metrics := reconcile.NewMetrics(nil)
	r := reconcile.New(reconcile.Deps{Pool: pool, Ledger: dbtest.Ledger(t, pool), Metrics: metrics}, reconcile.Options{})
	for pass := range 2 {
		rep, err := r.Pass(ctx)
		if err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
		wantBilled := int64(1)
		if pass > 0 {
			wantBilled = 0
		}
		if b := rep.Bill; b.Billed != wantBilled || b.OutOfRange != 10_000 || len(b.OutOfRangeAccounts) != 1 || b.OutOfRangeAccounts[0] != "acct_1" {
			t.Fatalf("pass %d: billed %d, out of range %d %v; want %d billed and acct_1's 10000 left out", pass, b.Billed, b.OutOfRange, b.OutOfRangeAccounts, wantBilled)
		}
		if got := testutil.ToFloat64(metrics.OutOfRange); got != 10_000 {
			t.Fatalf("pass %d: out_of_range_decisions = %v, want 10000", pass, got)
		}
	}
	var b1, b2, usage int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT balance FROM accounts WHERE id = 'acct_1'), (SELECT balance FROM accounts WHERE id = 'acct_2'),
		(SELECT count(*) FROM ledger)`).Scan(&b1, &b2, &usage); err != nil {
		t.Fatal(err)
	}
	if b1 != 0 || b2 != -5 || usage != 1 {
		t.Fatalf("balances %d and %d with %d entries; want 0, -5 and the one usage entry", b1, b2, usage)
	}
	violations, err := db.Verify(ctx, pool, time.Now(), time.Hour, time.Hour)
	if err != nil || len(violations) != 1 || violations[0].Check != "unbillable" || !strings.Contains(violations[0].Detail, "acct_1") {
		t.Fatalf("verify = %v, %v; want the one unbillable account acct_1", violations, err)
	}
}
