// Command onceledger-bench measures the real onceledger server side by side with the physical limit of
// the same machine: every workload is also run as the same SQL straight through pgx (no HTTP, no JSON,
// no signature), in the same invocation, and the table shows the ratio. `make bench` runs it.
//
// It starts `onceledger serve` as its own process (so that its memory is its own) on a scratch
// database of the local PostgreSQL server, loopback only, and drops the database at the end.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/pglocal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "onceledger-bench:", err)
		os.Exit(1)
	}
}

type options struct {
	quick    bool
	only     string
	bin      string
	duration time.Duration
	accounts int
	// billingSamples is how many times each billing benchmark runs: its row is their median, since
	// one pass of a minute moves by a fifth between runs on a shared machine.
	billingSamples int
	dataDir        string
	citus          bool
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("onceledger-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.BoolVar(&o.quick, "quick", false, "smoke run: a fraction of a second per workload, no billing")
	fs.StringVar(&o.bin, "bin", ".bin/onceledger", "the onceledger binary to measure")
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "how long each workload runs")
	fs.StringVar(&o.only, "only", "", "run only the workloads of these families (comma-separated): webhook, webhook-group, postings, holds, limits, pools, notify, tracing, statement, billing")
	fs.IntVar(&o.accounts, "accounts", 10_000, "accounts the webhook workloads spread top-ups over")
	fs.IntVar(&o.billingSamples, "billing-samples", 3, "passes of each billing benchmark (each bills 1,000,000 decisions), a billing row being their median")
	fs.BoolVar(&o.citus, "citus", false, "run the workloads on the machine's PostgreSQL, then on a local Citus cluster (a "+
		"coordinator and two workers on this machine: the coordination cost, not the scale gain), and print them side by side")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.billingSamples < 1 {
		return fmt.Errorf("-billing-samples must be at least 1, not %d", o.billingSamples)
	}
	if o.quick {
		o.duration = 300 * time.Millisecond
	}
	o.dataDir = getenv("ONCELEDGER_DATA_DIR")
	if o.dataDir == "" {
		o.dataDir = ".data"
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if !o.citus {
		b, err := o.measure(ctx, false, getenv, log, stderr)
		if b != nil {
			b.print(stdout)
			fmt.Fprintln(stdout, "\n"+b.serverLine)
		}
		return err
	}
	// -citus: the same workloads on the machine's PostgreSQL, then on the cluster, in one table.
	plain, err := o.measure(ctx, false, getenv, log, stderr)
	if err != nil {
		return err
	}
	cluster, err := o.measure(ctx, true, getenv, log, stderr)
	if cluster != nil {
		printBackends(stdout, plain, cluster)
	}
	return err
}

// measure runs the chosen workloads against a scratch database on one backend (the machine's
// PostgreSQL, or the local Citus cluster) and a server of its own, and returns what it measured.
func (o options) measure(ctx context.Context, citus bool, getenv func(string) string, log *slog.Logger, stderr io.Writer) (*bench, error) {
	name := fmt.Sprintf("onceledger_bench_%d", time.Now().UnixNano())
	databaseURL, drop, err := scratchDatabase(ctx, o.dataDir, citus, name, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := drop(); err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintf(stderr, "onceledger-bench: drop scratch database %s: %v\n", name, err)
		}
	}()

	env := []string{
		"PATH=" + getenv("PATH"), "DATABASE_URL=" + databaseURL, "STRIPE_WEBHOOK_SECRET=" + webhookSecret,
		"ONCELEDGER_API_KEYS=" + apiKey, "RECONCILE_INTERVAL=1h",
	}
	// Passed on to the server when set: a pool size to compare, a profiling listener.
	for _, name := range []string{"DB_MAX_CONNS", "PPROF_ADDR"} {
		if v := getenv(name); v != "" {
			env = append(env, name+"="+v)
		}
	}
	if err := migrate(ctx, o.bin, env); err != nil {
		return nil, err
	}
	pool, err := db.Open(ctx, databaseURL, db.WithMaxConns(maxConcurrency))
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if err := seed(ctx, pool, o.accounts); err != nil {
		return nil, err
	}

	ledger := db.NewLedger(pool, db.LedgerConfig{})
	srv, err := startServer(ctx, o.bin, env)
	if err != nil {
		return nil, err
	}
	b := &bench{o: o, databaseURL: databaseURL, env: env, pool: pool, ledger: ledger, http: newClient(srv.base), srv: srv}
	b.all(ctx)
	hwm, hwmErr := srv.statusKB("VmHWM")
	stopErr := srv.stop()
	b.serverLine = fmt.Sprintf("server: ready %s after process start (migrations current); RSS peak %s (VmHWM), %s (highest VmRSS sampled)",
		srv.ready.Round(time.Millisecond), mib(hwm, hwmErr), mib(srv.peakRSS.get(), nil))
	if stopErr != nil {
		return b, fmt.Errorf("server did not stop cleanly: %w; logs:\n%s", stopErr, srv.logs)
	}
	return b, nil
}

const maxConcurrency = 64

// bench holds what the workloads share and the rows measured so far.
type bench struct {
	o           options
	databaseURL string
	env         []string // the server's environment
	pool        *pgxpool.Pool
	ledger      *db.Ledger // posts on pool, without side effects
	http        *client
	srv         *server
	rows        []row
	serverLine  string // the server's start-up time and memory, printed under the table
}

// row is one line of the table: a result and what its ratio compares it with.
type row struct {
	result
	baseline *result // nil: this row is a baseline
	note     string
}

func (b *bench) add(r result, baseline *result) {
	b.rows = append(b.rows, row{result: r, baseline: baseline})
}

// all runs every workload in order; each is bounded by the duration.
func (b *bench) all(ctx context.Context) {
	d, accounts := b.o.duration, b.o.accounts
	if b.wants("webhook") {
		b.webhooks(ctx, d, accounts)
	}
	if b.wants("webhook-group") {
		b.webhookGroupCommit(ctx, d, accounts)
	}
	if b.wants("postings") {
		b.postings(ctx, d)
	}
	if b.wants("holds") {
		b.holds(ctx, d)
	}
	if b.wants("limits") {
		b.limits(ctx, d)
	}
	if b.wants("pools") {
		b.pools(ctx, d)
	}
	if b.wants("notify") {
		b.notifications(ctx, d, accounts)
	}
	if b.wants("tracing") {
		b.tracing(ctx, d, accounts)
	}
	if b.wants("statement") {
		b.statement(ctx, b.srv)
	}
	if b.wants("billing") {
		b.billing(ctx)
	}
}

func (b *bench) wants(family string) bool {
	return b.o.only == "" || slices.Contains(strings.Split(b.o.only, ","), family)
}

// webhooks measures first deliveries at each concurrency, concurrent duplicate pairs, and
// redeliveries of events already processed.
func (b *bench) webhooks(ctx context.Context, d time.Duration, accounts int) {
	var cold32 result
	for _, c := range []int{1, 8, 32, 64} {
		run := fmt.Sprintf("c%d", c)
		base := measure(ctx, "webhook cold, direct SQL (fixed reference: 6 round trips)", c, d, func(ctx context.Context, i int) ([]time.Duration, error) {
			return timed(func() error { return applyTopupDirect(ctx, b.ledger, newTopupEvent("d"+run, i, accounts)) })
		})
		served := measure(ctx, "webhook cold", c, d, func(ctx context.Context, i int) ([]time.Duration, error) {
			return timed(func() error { return b.http.deliver(ctx, newTopupEvent("h"+run, i, accounts)) })
		})
		b.add(base, nil)
		b.add(served, &base)
		if c == 32 {
			cold32 = served
		}
	}

	// Pairs in flight: at c=32, 64 deliveries at once, as many as the baseline's connections.
	for _, c := range []int{1, 8, 32} {
		run := fmt.Sprintf("c%d", c)
		base := measure(ctx, "webhook duplicates (pairs), direct SQL", c, d, func(ctx context.Context, i int) ([]time.Duration, error) {
			e := newTopupEvent("dpair"+run, i, accounts)
			return pair(func() error { return applyTopupDirect(ctx, b.ledger, e) })
		})
		dup := measure(ctx, "webhook duplicates (pairs)", c, d, func(ctx context.Context, i int) ([]time.Duration, error) {
			e := newTopupEvent("hpair"+run, i, accounts)
			return pair(func() error { return b.http.deliver(ctx, e) })
		})
		b.add(base, nil)
		b.add(dup, &base)
	}
	if delivered := cold32.ops; delivered > 0 {
		// Every event of the cold c=32 run again: the cost of a duplicate next to a first delivery.
		redelivery := measure(ctx, "webhook redelivery (all duplicates)", 32, d, func(ctx context.Context, i int) ([]time.Duration, error) {
			return timed(func() error { return b.http.deliver(ctx, newTopupEvent("hc32", i%delivered, accounts)) })
		})
		b.rows = append(b.rows, row{result: redelivery, baseline: &cold32, note: "ratio vs webhook cold c=32: ≥ 3× means a duplicate costs ≤ 1/3 of a first delivery"})
	}
}

// postings measures credits on one account: one transaction per posting and group commit, straight
// through pgx, and through the API.
func (b *bench) postings(ctx context.Context, d time.Duration) {
	// One transaction per posting runs twice: on as many connections as callers (the lock queue grows
	// with them) and on pgxpool's default pool (four connections here), which queues callers in the
	// pool instead and is the faster of the two: the baseline group commit is measured against.
	serverPool, err := db.Open(ctx, b.databaseURL)
	if err != nil {
		b.rows = append(b.rows, row{result: result{workload: "postings hot", errors: 1, firstErr: err.Error()}})
		return
	}
	defer serverPool.Close()
	serverLedger := db.NewLedger(serverPool, db.LedgerConfig{})
	pooled := fmt.Sprintf("postings hot, 1 tx/posting, direct SQL, %d conns", serverPool.Config().MaxConns)
	for _, c := range []int{32, 64} {
		account := func(workload string) string { return fmt.Sprintf("bench_hot_%s_%d", workload, c) }
		oneTx := measure(ctx, pooled, c, d, func(ctx context.Context, i int) ([]time.Duration, error) {
			return timed(func() error { return postOneTx(ctx, serverLedger, hotAdjustment(account("pooled"), i)) })
		})
		oneTxPerCaller := measure(ctx, fmt.Sprintf("postings hot, 1 tx/posting, direct SQL, %d conns", c), c, d, func(ctx context.Context, i int) ([]time.Duration, error) {
			return timed(func() error { return postOneTx(ctx, b.ledger, hotAdjustment(account("tx"), i)) })
		})
		grouped := measure(ctx, "postings hot, group commit, direct (db.Ledger.PostGrouped)", c, d, func(ctx context.Context, i int) ([]time.Duration, error) {
			return timed(func() error {
				_, err := b.ledger.PostGrouped(ctx, hotAdjustment(account("group"), i))
				return err
			})
		})
		api, cpu := b.srv.cpuPerOp(func() result {
			return measure(ctx, "postings hot, API (group commit)", c, d, func(ctx context.Context, i int) ([]time.Duration, error) {
				return timed(func() error { return b.http.adjust(ctx, account("api"), strconv.Itoa(i)) })
			})
		})
		b.add(oneTx, nil)
		b.add(oneTxPerCaller, &oneTx)
		b.add(grouped, &oneTx)
		b.rows = append(b.rows, row{result: api, baseline: &oneTx, note: cpu})
	}
}

// holds measures authorisations on one hot account at c=64: one transaction per authorisation on
// pgxpool's default pool (the baseline, as for postings), group commit straight through pgx (db.HoldAuthoriser),
// and through the API. Each workload has an account of its own, funded so that none is refused: a
// refusal rolls back and would spare the baseline its commit.
func (b *bench) holds(ctx context.Context, d time.Duration) {
	hot, err := b.authorisations(ctx, d, "authorisations hot", "bench_hold_", db.HoldRequest{}, nil)
	if err != nil {
		b.rows = append(b.rows, row{result: result{workload: "authorisations hot", errors: 1, firstErr: err.Error()}})
		return
	}
	b.add(hot.oneTx, nil)
	b.add(hot.grouped, &hot.oneTx)
	b.rows = append(b.rows, row{result: hot.api, baseline: &hot.oneTx, note: hot.cpu})
}

// threeLimits are the spend limits of the limits family: one of each scope, all applying to every
// authorisation of spendingAs, hard, with caps no run reaches, so that each is judged and moved and
// none refuses.
var threeLimits = map[string]db.LimitDefinition{
	"daily":  {Scope: db.ScopeAccount, Period: "day", Amount: db.MaxAmount, Mode: db.LimitHard},
	"agent":  {Scope: db.ScopeSubject, ScopeValue: "agent-1", Period: "week", Amount: db.MaxAmount, Mode: db.LimitHard},
	"search": {Scope: db.ScopeFeature, ScopeValue: "search", Period: "month", Amount: db.MaxAmount, Mode: db.LimitHard},
}

var spendingAs = db.HoldRequest{Subject: "agent-1", Feature: "search"}

// limits measures the holds family's authorisations on one hot account with the three spend limits
// of threeLimits applying to each, next to the same authorisations (same subject and feature) on an
// account without limits: directly (one transaction each, and group commit) and through the API.
func (b *bench) limits(ctx context.Context, d time.Duration) {
	without, err := b.authorisations(ctx, d, "authorisations hot, no limits", "bench_nolimit_", spendingAs, nil)
	if err == nil {
		var with authorisationRows
		if with, err = b.authorisations(ctx, d, "authorisations hot, 3 limits", "bench_limits_", spendingAs, threeLimits); err == nil {
			note := "ratio vs the same authorisations on an account without limits"
			for _, pair := range []struct{ base, limited result }{{without.oneTx, with.oneTx}, {without.grouped, with.grouped}, {without.api, with.api}} {
				b.add(pair.base, nil)
				b.rows = append(b.rows, row{result: pair.limited, baseline: &pair.base, note: note})
			}
			return
		}
	}
	b.rows = append(b.rows, row{result: result{workload: "authorisations hot, 3 limits", errors: 1, firstErr: err.Error()}})
}

// poolMembers is how many members share the pools family's organisation: one per worker at c=64.
const poolMembers = 64

// pools measures authorisations at c=64 on the members of one organisation, each member with nothing of
// its own, so that every hold reserves on the organisation's row (SPEC §18): one transaction each on the
// 4-connection pool (the baseline, as for holds) and group commit straight through pgx. Each workload has
// a tree of its own, the organisation funded so that none is refused.
func (b *bench) pools(ctx context.Context, d time.Duration) {
	const c = 64
	label := "pool draws hot"
	fail := func(err error) {
		b.rows = append(b.rows, row{result: result{workload: label, errors: 1, firstErr: err.Error()}})
	}
	serverPool, err := db.Open(ctx, b.databaseURL)
	if err != nil {
		fail(err)
		return
	}
	defer serverPool.Close()
	member := func(workload string, i int) string { return fmt.Sprintf("bench_pool_%s_%02d", workload, i%poolMembers) }
	for _, w := range []string{"tx", "group"} {
		if err := b.poolTree(ctx, "bench_pool_"+w, func(i int) string { return member(w, i) }); err != nil {
			fail(err)
			return
		}
	}
	hold := func(i int) db.HoldRequest {
		return db.HoldRequest{ID: "h" + strconv.Itoa(i), Amount: 1, ExpiresIn: time.Hour}
	}
	// Operation i draws through member i%64: the 64 workers spread over the 64 members.
	oneTx := measure(ctx, fmt.Sprintf("%s, 1 tx each, direct SQL, %d conns", label, serverPool.Config().MaxConns), c, d,
		func(ctx context.Context, i int) ([]time.Duration, error) {
			return timed(func() error {
				_, err := db.AuthoriseHold(ctx, serverPool, member("tx", i), hold(i))
				return err
			})
		})
	grouped := measure(ctx, label+", group commit, direct (db.Ledger.AuthoriseHoldGrouped)", c, d, func(ctx context.Context, i int) ([]time.Duration, error) {
		return timed(func() error {
			_, err := b.ledger.AuthoriseHoldGrouped(ctx, member("group", i), hold(i))
			return err
		})
	})
	b.add(oneTx, nil)
	b.rows = append(b.rows, row{result: grouped, baseline: &oneTx,
		note: fmt.Sprintf("%d members with nothing of their own, every hold reserved on their organisation's row", poolMembers)})
}

// poolTree creates the organisation root, funded, and its poolMembers members member(0) … member(63),
// each with a balance of 0.
func (b *bench) poolTree(ctx context.Context, root string, member func(i int) string) error {
	if _, err := b.ledger.CreateAccount(ctx, root, "usd", 1_000_000_000_000); err != nil {
		return fmt.Errorf("organisation %s: %w", root, err)
	}
	for i := range poolMembers {
		if _, err := b.ledger.CreateMember(ctx, member(i), "usd", root, 0); err != nil {
			return fmt.Errorf("member %s of %s: %w", member(i), root, err)
		}
	}
	return nil
}

// authorisationRows are the three ways of authorising on a hot account, and the server's CPU per
// authorisation through the API.
type authorisationRows struct {
	oneTx, grouped, api result
	cpu                 string
}

// authorisations measures authorisations of 1 (as spending says) at c=64 on three accounts named by
// prefix, each funded so that none is refused (a refusal rolls back and would spare the baseline its
// commit) and given limits: one transaction each, group commit, and through the API.
func (b *bench) authorisations(ctx context.Context, d time.Duration, label, prefix string, spending db.HoldRequest, limits map[string]db.LimitDefinition) (authorisationRows, error) {
	const c = 64
	serverPool, err := db.Open(ctx, b.databaseURL)
	if err != nil {
		return authorisationRows{}, err
	}
	defer serverPool.Close()
	account := func(workload string) string { return prefix + workload }
	for _, w := range []string{"tx", "group", "api"} {
		if _, err := b.ledger.CreateAccount(ctx, account(w), "usd", 1_000_000_000_000); err != nil {
			return authorisationRows{}, err
		}
		for id, def := range limits {
			if err := db.PutLimit(ctx, b.pool, account(w), id, def); err != nil {
				return authorisationRows{}, err
			}
		}
	}
	hold := func(i int) db.HoldRequest {
		return db.HoldRequest{ID: "h" + strconv.Itoa(i), Amount: 1, ExpiresIn: time.Hour, Subject: spending.Subject, Feature: spending.Feature}
	}
	var out authorisationRows
	out.oneTx = measure(ctx, fmt.Sprintf("%s, 1 tx each, direct SQL, %d conns", label, serverPool.Config().MaxConns), c, d,
		func(ctx context.Context, i int) ([]time.Duration, error) {
			return timed(func() error {
				_, err := db.AuthoriseHold(ctx, serverPool, account("tx"), hold(i))
				return err
			})
		})
	out.grouped = measure(ctx, label+", group commit, direct (db.Ledger.AuthoriseHoldGrouped)", c, d, func(ctx context.Context, i int) ([]time.Duration, error) {
		return timed(func() error {
			_, err := b.ledger.AuthoriseHoldGrouped(ctx, account("group"), hold(i))
			return err
		})
	})
	out.api, out.cpu = b.srv.cpuPerOp(func() result {
		return measure(ctx, label+", API (group commit)", c, d, func(ctx context.Context, i int) ([]time.Duration, error) {
			return timed(func() error { return b.http.authorise(ctx, account("api"), hold(i)) })
		})
	})
	return out, nil
}

// billingBenchmark is the reconciler's own benchmarks: one first billing pass over 1,000,000 decisions,
// through the reconciler and through its baseline (the same SQL through pgx), over 1,000 accounts and
// over one (BenchmarkBilling); the same pass over decisions that each name a hold (BenchmarkBillingHolds,
// 1,000 accounts), compared with billing without holds; and a second pass over decisions billed already
// (BenchmarkReread), compared with the first. Each reports decisions/s.
const billingBenchmark = "^Benchmark(Billing(Holds)?|Reread)$"

// lotsBenchmark is the first billing pass over 1,000 accounts that hold 1, 5 or 50 open credit lots
// each, or none (all debt), next to the same pass with the lots trigger disabled (BenchmarkBillingLots).
// Its five passes take as long as the others together, so it runs once.
const lotsBenchmark = "^BenchmarkBillingLots$"

var billingLine = regexp.MustCompile(`^Benchmark(Billing|BillingHolds|BillingLots|Reread)/accounts=(\d+)/(reconciler|baseline|lots=\d+|debt)\S*\s.*?([0-9.e+]+) decisions/s`)

// passes says what a billing row of n passes is.
func passes(n int) string {
	if n == 1 {
		return "one pass"
	}
	return fmt.Sprintf("median of %d passes", n)
}

// billing runs the reconciler's benchmarks -billing-samples times (`go test` in internal/reconcile/) and turns the
// median of each rate into a row of the table, each reconciler row next to its baseline.
func (b *bench) billing(ctx context.Context) {
	if b.o.citus {
		b.billingPass(ctx)
		return
	}
	switch _, err := os.Stat("internal/reconcile"); {
	case err != nil:
		b.rows = append(b.rows, row{result: result{workload: "billing"}, note: "no reconcile package in this tree"})
		return
	case b.o.quick:
		b.rows = append(b.rows, row{result: result{workload: "billing"}, note: "skipped by -quick: 1,000,000 decisions take minutes"})
		return
	}
	var out []byte
	for _, run := range []struct {
		bench   string
		samples int
	}{{billingBenchmark, b.o.billingSamples}, {lotsBenchmark, 1}} {
		cmd := exec.CommandContext(ctx, "go", "test", "-count", strconv.Itoa(run.samples), "-run", "^$",
			"-bench", run.bench, "-benchtime", "1x", "./internal/reconcile")
		o, err := cmd.CombinedOutput()
		if err != nil {
			b.rows = append(b.rows, row{result: result{workload: "billing", errors: 1, firstErr: clip(string(o), 400)}})
			return
		}
		out = append(out, o...)
	}
	samples := map[string][]float64{} // "Billing1000/baseline", "Reread1/reconciler" → decisions/s, one per run
	for _, line := range strings.Split(string(out), "\n") {
		if m := billingLine.FindStringSubmatch(line); m != nil {
			if rate, err := strconv.ParseFloat(m[4], 64); err == nil {
				key := m[1] + m[2] + "/" + m[3]
				samples[key] = append(samples[key], rate)
			}
		}
	}
	median := func(workload, key string) result {
		r := result{workload: workload, concurrency: 1, rate: medianOf(samples[key])}
		if r.rate == 0 {
			r.errors, r.firstErr = 1, "no decisions/s for "+key+" in the output of go test -bench in ./internal/reconcile"
		}
		return r
	}
	for _, accounts := range []struct{ key, label string }{{"1000", "1,000 accounts"}, {"1", "one account"}} {
		base := median("billing, "+accounts.label+", direct SQL", "Billing"+accounts.key+"/baseline")
		reconciler := median("billing, "+accounts.label, "Billing"+accounts.key+"/reconciler")
		b.add(base, nil)
		b.rows = append(b.rows, row{result: reconciler, baseline: &base, note: "decisions/s, " + passes(b.o.billingSamples) + " (as every billing row)"})
		if accounts.key == "1000" {
			withHolds := median("billing with holds, 1,000 accounts", "BillingHolds1000/reconciler")
			b.rows = append(b.rows, row{result: withHolds, baseline: &reconciler, note: "ratio vs billing without holds: every decision also captures its hold"})
			noLots := median("billing, lots trigger off, 1,000 accounts", "BillingLots1000/lots=0")
			b.add(noLots, nil)
			for _, lots := range []struct{ key, label string }{
				{"lots=1", "1 open lot"}, {"lots=5", "5 open lots"}, {"lots=50", "50 open lots"}, {"debt", "no lots: all debt"},
			} {
				withLots := median("billing with lots, 1,000 accounts, "+lots.label+" each", "BillingLots1000/"+lots.key)
				b.rows = append(b.rows, row{result: withLots, baseline: &noLots, note: "one pass; ratio vs the same pass with the lots trigger disabled"})
			}
		}
		reread := median("re-read, "+accounts.label, "Reread"+accounts.key+"/reconciler")
		b.rows = append(b.rows, row{result: reread, baseline: &reconciler, note: "ratio: re-read ÷ billing, a second pass over decisions billed already"})
	}
}

// medianOf returns the median of samples (the lower middle one of an even count), 0 when none.
func medianOf(samples []float64) float64 {
	if len(samples) == 0 {
		return 0
	}
	sorted := slices.Sorted(slices.Values(samples))
	return sorted[(len(sorted)-1)/2]
}

func (b *bench) print(w io.Writer) {
	t := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(t, "workload\tc\tops/s\tp50\tp99\tratio\terrors\t")
	var notes []string
	for _, r := range b.rows {
		if r.concurrency == 0 {
			fmt.Fprintf(t, "%s\t-\t-\t-\t-\t-\t%d\t\n", r.workload, r.errors)
			if r.note != "" {
				notes = append(notes, r.workload+": "+r.note)
			}
			if r.errors > 0 {
				notes = append(notes, r.workload+": "+r.firstErr)
			}
			continue
		}
		ratio := "baseline"
		if r.baseline != nil {
			ratio = "-"
			if base, own := r.baseline.opsPerSecond(), r.opsPerSecond(); base > 0 && own > 0 {
				ratio = fmt.Sprintf("%.2f×", own/base)
			}
		}
		fmt.Fprintf(t, "%s\t%d\t%.0f\t%s\t%s\t%s\t%d\t\n", r.workload, r.concurrency, r.opsPerSecond(),
			ms(r.p50), ms(r.p99), ratio, r.errors)
		if r.note != "" {
			notes = append(notes, fmt.Sprintf("%s c=%d: %s", r.workload, r.concurrency, r.note))
		}
		if r.errors > 0 {
			notes = append(notes, fmt.Sprintf("%s c=%d: %d errors, first: %s", r.workload, r.concurrency, r.errors, clip(r.firstErr, 160)))
		}
	}
	t.Flush()
	fmt.Fprintln(w, "\nratio: ops/s over the row above it marked baseline (same workload, same concurrency, same SQL through pgx).")
	for _, n := range notes {
		fmt.Fprintln(w, "  "+n)
	}
}

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

func mib(kb int64, err error) string {
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return fmt.Sprintf("%.1f MiB", float64(kb)/1024)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func migrate(ctx context.Context, bin string, env []string) error {
	cmd := exec.CommandContext(ctx, bin, "migrate", "up")
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s migrate up: %w\n%s", bin, err, out)
	}
	return nil
}

// seed creates the accounts the workloads post to, in one statement.
func seed(ctx context.Context, pool *pgxpool.Pool, accounts int) error {
	_, err := pool.Exec(ctx, `
		INSERT INTO accounts (id, currency)
		SELECT 'bench_' || lpad(n::text, 5, '0'), 'usd' FROM generate_series(0, $1 - 1) AS n
		UNION ALL SELECT unnest($2::text[]), 'usd'`, accounts, hotAccounts)
	if err != nil {
		return fmt.Errorf("seed %d accounts: %w", accounts, err)
	}
	return nil
}

// scratchDatabase makes the database a run uses, on the machine's server or (citus) on every node of
// the local Citus cluster, and returns its URL and how to drop it, even when the run was interrupted.
func scratchDatabase(ctx context.Context, dataDir string, citus bool, name string, log *slog.Logger) (string, func() error, error) {
	bounded := func(drop func(context.Context) error) func() error {
		return func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			return drop(ctx)
		}
	}
	if citus {
		cluster, err := pglocal.StartCluster(ctx, dataDir, log)
		if err != nil {
			return "", nil, err
		}
		url, err := cluster.Database(ctx, name)
		return url, bounded(func(ctx context.Context) error { return cluster.DropDatabase(ctx, name) }), err
	}
	serverURL, err := pglocal.Server(ctx, dataDir, log)
	if err != nil {
		return "", nil, err
	}
	url, err := pglocal.Database(ctx, serverURL, name)
	return url, bounded(func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, serverURL)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		return err
	}), err
}
