//go:build citus

package db_test

// What only a cluster has: how the tables are spread, and where each statement runs. Every other test of
// the suite runs on the cluster too under make test-citus (ONCELEDGER_TEST_BACKEND=citus).

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

// The migrations ran unchanged and the distribute step spread the tables as SPEC §15 lists: accounts by
// id, every table of an account's data by account_id colocated with it, the other tables by a key of
// their own; the seed's global index gave way to the per-account one and the claims. The step runs on
// every migrate up: running it again on a distributed database changes nothing.
func TestCitusDistributesTheSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.URL(t)
	ms, err := db.OpenMigrations(url)
	if err != nil {
		t.Fatal(err)
	}
	err = ms.Up()
	ms.Close()
	if err != nil {
		t.Fatalf("migrate up again: %v", err)
	}
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	// Every table with an account_id column is an account's data: distributed by it, with accounts.
	rows, err := pool.Query(ctx, `
		SELECT c.relname, coalesce(column_to_column_name(p.logicalrelid, p.partkey), ''),
		       coalesce(p.colocationid = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'accounts'::regclass), false)
		FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
		LEFT JOIN pg_dist_partition p ON p.logicalrelid = c.oid
		WHERE c.relkind = 'r' AND (p.logicalrelid IS NOT NULL
		      OR EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'account_id' AND NOT a.attisdropped))
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var table, column string
		var withAccounts bool
		if err := rows.Scan(&table, &column, &withAccounts); err != nil {
			t.Fatal(err)
		}
		got[table] = fmt.Sprintf("%s colocated=%t", column, withAccounts)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	keyed := map[string]string{
		"accounts": "id colocated=true", "stripe_events": "event_id colocated=false",
		"dedupe_claims": "dedupe_key colocated=false", "stripe_drift_checkpoints": "window_start colocated=false",
		"console_sessions": "id colocated=false",
		// Reference tables: a copy on every node, no distribution column.
		"revenue_periods": " colocated=false", "revenue_period_balances": " colocated=false",
	}
	for table, distribution := range got {
		want, ok := keyed[table]
		if !ok {
			want = "account_id colocated=true"
		}
		if distribution != want {
			t.Errorf("%s distributed as %q, want %q", table, distribution, want)
		}
	}
	for table := range keyed {
		if _, ok := got[table]; !ok {
			t.Errorf("%s is not distributed", table)
		}
	}
	var seedIndex, perAccount bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('ledger_dedupe_idx') IS NOT NULL, to_regclass('ledger_account_dedupe_idx') IS NOT NULL`).
		Scan(&seedIndex, &perAccount); err != nil {
		t.Fatal(err)
	}
	if seedIndex || !perAccount {
		t.Errorf("ledger_dedupe_idx present=%t, ledger_account_dedupe_idx present=%t", seedIndex, perAccount)
	}
	// The ledger's estimate of entries per account (n_distinct on account_id) is on every shard, where the
	// workers plan the shards' statements.
	var shards, without int
	err = pool.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE NOT success OR result <> 't')
		FROM run_command_on_shards('ledger', $$SELECT 'n_distinct=-0.5' = ANY(attoptions) FROM pg_attribute
		                                       WHERE attrelid = '%s'::regclass AND attname = 'account_id'$$)`).Scan(&shards, &without)
	if err != nil {
		t.Fatal(err)
	}
	if shards == 0 || without > 0 {
		t.Errorf("%d of the ledger's %d shards plan without the estimate of entries per account", without, shards)
	}
}

// statements records the sqlc statements a pool runs, with their arguments, to EXPLAIN them after.
type statements struct {
	mu   sync.Mutex
	runs []statement
}

type statement struct {
	name, sql string
	args      []any
}

var sqlcName = regexp.MustCompile(`^-- name: (\w+)`)

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if m := sqlcName.FindStringSubmatch(data.SQL); m != nil {
		s.mu.Lock()
		s.runs = append(s.runs, statement{name: m[1], sql: data.SQL, args: data.Args})
		s.mu.Unlock()
	}
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A pipelined transaction's statements (a group's, the happy path's) are sent as a batch.
func (s *statements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (s *statements) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	s.TraceQueryStart(ctx, nil, pgx.TraceQueryStartData{SQL: data.SQL, Args: data.Args})
}

func (s *statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// take returns the statements recorded since the last take.
func (s *statements) take() []statement {
	s.mu.Lock()
	defer s.mu.Unlock()
	runs := s.runs
	s.runs = nil
	return runs
}

// remoteCommands are the commands a coordinator's connection sent to the workers (citus.log_remote_commands).
type remoteCommands struct {
	mu       sync.Mutex
	commands []string
}

var issuing = regexp.MustCompile(`^(?:issuing|executing the command locally:) (.*)`)

func (r *remoteCommands) notice(_ *pgconn.PgConn, n *pgconn.Notice) {
	if m := issuing.FindStringSubmatch(n.Message); m != nil {
		r.mu.Lock()
		r.commands = append(r.commands, m[1])
		r.mu.Unlock()
	}
}

func (r *remoteCommands) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	commands := r.commands
	r.commands = nil
	return commands
}

// remoteLoggingPool is a pool on url whose connections log the commands they send the workers (read with
// remote.take), and whose statements go to tracer when there is one. It is closed when the test ends.
func remoteLoggingPool(t *testing.T, url string, tracer pgx.QueryTracer) (pool *pgxpool.Pool, remote *remoteCommands) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	remote = &remoteCommands{}
	cfg.ConnConfig.Tracer = tracer
	cfg.ConnConfig.OnNotice = remote.notice
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `SET citus.log_remote_commands = on`)
		return err
	}
	pool, err = pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, remote
}

// Where each statement runs on the cluster, read from EXPLAIN of every statement the real operations ran
// (with their arguments) and from the commands the coordinator sent to the workers:
//   - no statement repartitions rows between workers, and no INSERT ... SELECT reads a distributed table
//     through the coordinator ("pull to coordinator" above a distributed scan): the set-based passes
//     (billing, lot expiry, hold expiry) read each shard where it is, all shards in parallel;
//   - the operations on one account (a posting, a group of them, a hold's authorisation, capture and
//     void, a lot's void) touch one shard of the account tables: every statement whose plan is distributed
//     runs as one task there, and every command ledger_append sends lands on that shard (or on the
//     shards of dedupe_claims that hold the keys).
func TestCitusStatementsRunWhereTheirRowsAre(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.URL(t)
	recorded := &statements{}
	pool, remote := remoteLoggingPool(t, url, recorded)
	explain, err := pgxpool.New(ctx, url) // EXPLAIN on a pool of its own: its statements are not recorded
	if err != nil {
		t.Fatal(err)
	}
	defer explain.Close()
	ledger := dbtest.Ledger(t, pool)

	// Accounts on every shard, each with a grant lot expiring in an hour.
	var accounts []string
	for i := range 24 {
		accounts = append(accounts, fmt.Sprintf("acct_%02d", i))
		if _, err := ledger.CreateAccount(ctx, accounts[i], "usd", 1000); err != nil {
			t.Fatal(err)
		}
	}
	var decisions []db.Decision
	for i, a := range accounts {
		decisions = append(decisions, db.Decision{ID: fmt.Sprintf("d_%d", i), AccountID: a, Cost: 3, OccurredAt: time.Now()})
	}
	if _, err := db.StoreDecisions(ctx, pool, decisions); err != nil {
		t.Fatal(err)
	}
	recorded.take()
	remote.take()

	// One account's operations.
	one := accounts[0]
	if _, err := ledger.PostGrouped(ctx, db.Posting{AccountID: one, Kind: db.KindAdjustment, Amount: -5, DedupeKey: "api:one:1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.AuthoriseHoldGrouped(ctx, one, db.HoldRequest{ID: "h_capture", Amount: 50, ExpiresIn: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.CaptureHold(ctx, one, "h_capture", 20); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.AuthoriseHoldGrouped(ctx, one, db.HoldRequest{ID: "h_void", Amount: 50, ExpiresIn: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.VoidHold(ctx, pool, one, "h_void"); err != nil {
		t.Fatal(err)
	}
	payCheckoutByTheGeneralPath(t, pool, ledger, one)
	payCheckoutByTheHappyPath(t, ledger, one)
	lots, err := db.Lots(ctx, pool, one, false, 10)
	if err != nil || len(lots) == 0 {
		t.Fatalf("lots of %s: %v %v", one, lots, err)
	}
	oneAccount := recorded.take()
	oneAccountCommands := remote.take()
	// A lot's void names the lot alone (POST /v1/lots/{id}/void): finding its account asks every shard
	// once (its first statement, CreditLotsGet); everything after runs on the account's.
	if _, err := ledger.VoidLot(ctx, lots[0].ID); err != nil {
		t.Fatal(err)
	}
	void := recorded.take()
	if len(void) < 2 || void[0].name != "CreditLotsGet" {
		t.Fatalf("a lot's void ran %v, want CreditLotsGet first", void)
	}
	oneAccount = append(oneAccount, void[1:]...)
	voidCommands := remote.take()
	for _, c := range voidCommands {
		if strings.Contains(c, "credit_lots_") && strings.Contains(c, "SELECT") && !strings.Contains(c, "FOR ") {
			// The lookup's fan-out: every shard of credit_lots once, before any lock.
			continue
		}
		oneAccountCommands = append(oneAccountCommands, c)
	}

	// The set-based passes, over every account: billing, holds and lots past their time.
	for _, a := range accounts[1:] {
		if _, err := ledger.AuthoriseHoldGrouped(ctx, a, db.HoldRequest{ID: "h_old", Amount: 10, ExpiresIn: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE holds SET created_at = now() - interval '2 hours', expires_at = now() - interval '1 hour' WHERE id = 'h_old'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE credit_lots SET created_at = now() - interval '2 hours', expires_at = now() - interval '1 hour' WHERE closed_at IS NULL`); err != nil {
		t.Fatal(err)
	}
	recorded.take()
	var last int64
	if err := pool.QueryRow(ctx, `SELECT max(seq) FROM decisions`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.BillChunk(ctx, 0, last, 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExpireHolds(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ledger.ExpireLots(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	passes := recorded.take()

	for i, s := range append(oneAccount, passes...) {
		plan := explainPlan(t, explain, s)
		if strings.Contains(strings.ToLower(plan), "repartition") {
			t.Errorf("%s repartitions rows between workers:\n%s", s.name, plan)
		}
		if pulledFromShards(plan) {
			t.Errorf("%s pulls a distributed table's rows to the coordinator to insert them:\n%s", s.name, plan)
		}
		if i >= len(oneAccount) {
			continue
		}
		for _, n := range taskCounts.FindAllStringSubmatch(plan, -1) {
			if n[1] != "1" && !onKeyedTable(plan) {
				t.Errorf("%s, for one account, runs on %s shards:\n%s", s.name, n[1], plan)
			}
		}
	}
	shards := accountShardsTouched(t, explain, oneAccountCommands)
	if len(shards) != 1 {
		t.Errorf("one account's operations sent commands to %d shards of the account tables (%v), want 1", len(shards), shards)
	}
	if len(oneAccount) == 0 || len(passes) == 0 || len(oneAccountCommands) == 0 {
		t.Fatalf("recorded %d statements for one account, %d for the passes, %d remote commands", len(oneAccount), len(passes), len(oneAccountCommands))
	}
}

// A group of first deliveries records its events (stripe_events_insert_group) as each shard's own
// INSERT ... VALUES: no intermediate result is written for them on the workers, as an INSERT ... SELECT
// from the arrays through the coordinator does (tens of milliseconds of a group's transaction).
func TestCitusGroupRecordsItsEventsOnTheirShards(t *testing.T) {
	t.Parallel()
	pool, remote := remoteLoggingPool(t, dbtest.URL(t), nil)
	g := dbtest.Ledger(t, pool, db.LedgerConfig{GroupCheckouts: true})
	var payments []db.CheckoutPayment
	for i := range 12 {
		account := fmt.Sprintf("acct_g%02d", i)
		newAccount(t, pool, account)
		payments = append(payments, checkoutPayment(fmt.Sprintf("evt_g%02d", i), fmt.Sprintf("cs_g%02d", i), fmt.Sprintf("pi_g%02d", i), account, 100))
	}
	wait := startOneGroup(t, pool, g, payments)
	remote.take() // the group is held: what follows is its transaction
	for i, a := range wait() {
		if a.err != nil || a.paid != db.CheckoutCredited {
			t.Fatalf("member %d: %v %v, want credited", i, a.paid, a.err)
		}
	}
	shards := map[string]bool{}
	for _, c := range remote.take() {
		shard := eventShard.FindString(c)
		if shard == "" {
			continue
		}
		if strings.Contains(c, "intermediate_result") {
			t.Errorf("the group's events went through an intermediate result: %.300s", c)
		}
		if strings.HasPrefix(c, "INSERT INTO") {
			shards[shard] = true
		}
	}
	if len(shards) < 2 {
		t.Fatalf("the group inserted its events on %d shards of stripe_events (%v), want each event's", len(shards), shards)
	}
}

var eventShard = regexp.MustCompile(`stripe_events_\d+`)

// payCheckoutByTheGeneralPath applies a paid Checkout Session's first delivery as the webhook's general
// path does (internal/stripeevents' Processor.Process): whether the event is recorded, then in
// one transaction the event recorded as applied, the payment locked, the order paid, the events waiting
// for the payment read and the credit posted.
func payCheckoutByTheGeneralPath(t *testing.T, pool *pgxpool.Pool, ledger *db.Ledger, account string) {
	t.Helper()
	ctx := context.Background()
	order := db.Topup{ID: "top_" + account, AccountID: account, Amount: 500, Currency: "usd"}
	if _, _, err := db.InsertPendingTopup(ctx, pool, order); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE topups SET session_id = 'cs_'||account_id WHERE account_id = $1 AND id = $2`, account, order.ID); err != nil {
		t.Fatal(err)
	}
	order.SessionID, order.PaymentIntent = "cs_"+account, "pi_"+account
	event := db.Event{ID: "evt_" + account, Type: "checkout.session.completed", Created: time.Now(), Payload: []byte(`{}`),
		Outcome: "applied", PaymentIntent: order.PaymentIntent}
	if recorded, err := db.EventRecorded(ctx, pool, event.ID); err != nil || recorded {
		t.Fatalf("event recorded %t, %v", recorded, err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if duplicate, err := db.RecordEvent(ctx, tx, event); err != nil || duplicate {
		t.Fatalf("record event: duplicate %t, %v", duplicate, err)
	}
	if err := db.LockPayment(ctx, tx, order.PaymentIntent); err != nil {
		t.Fatal(err)
	}
	if _, paid, err := db.PayTopup(ctx, tx, order, event.ID); err != nil || !paid {
		t.Fatalf("pay order: paid %t, %v", paid, err)
	}
	if _, err := db.ParkedEventsForPayment(ctx, tx, order.PaymentIntent); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.Post(ctx, tx, db.Posting{AccountID: account, Kind: db.KindTopup, Amount: order.Amount,
		PaymentIntent: order.PaymentIntent, DedupeKey: "stripe:" + event.ID}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// payCheckoutByTheHappyPath applies a paid Checkout Session's first delivery, of a session without an
// order, as the webhook's happy path does: the state read (checkout_state: the event, the session's
// claim and the account, each on its one shard), then PayCheckout's transaction.
func payCheckoutByTheHappyPath(t *testing.T, ledger *db.Ledger, account string) {
	t.Helper()
	ctx := context.Background()
	p := checkoutPayment("evt_happy_"+account, "cs_happy_"+account, "pi_happy_"+account, account, 300)
	state, err := ledger.ReadCheckoutState(ctx, p.Event.ID, p.Order.SessionID, account, p.Order.PaymentIntent)
	if err != nil || state.Recorded || state.Order != nil || state.Account == nil || state.Account.ID != account || state.GeneralPath {
		t.Fatalf("state of a new session: %+v %v", state, err)
	}
	if paid, _, err := ledger.PayCheckout(ctx, p); err != nil || paid != db.CheckoutCredited {
		t.Fatalf("happy path: %v %v, want credited", paid, err)
	}
	state, err = ledger.ReadCheckoutState(ctx, p.Event.ID, p.Order.SessionID, account, p.Order.PaymentIntent)
	if err != nil || !state.Recorded {
		t.Fatalf("state of a recorded event: %+v %v", state, err)
	}
}

var taskCounts = regexp.MustCompile(`Task Count: (\d+)`)

func explainPlan(t *testing.T, pool *pgxpool.Pool, s statement) string {
	t.Helper()
	rows, err := pool.Query(context.Background(), "EXPLAIN "+s.sql, s.args...)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", s.name, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", s.name, err)
	}
	return strings.Join(lines, "\n")
}

// pulledFromShards: an INSERT ... SELECT whose rows come to the coordinator from a distributed scan in
// its own subtree. Rows planned on the coordinator from arrays (ledger_append's, the intake's) or from a
// CTE's intermediate result (a distributed subplan of its own, checked as such) are not pulled from
// any shard.
func pulledFromShards(plan string) bool {
	lines := strings.Split(plan, "\n")
	for i, line := range lines {
		if !strings.Contains(line, "INSERT/SELECT method: pull to coordinator") || i == 0 {
			continue
		}
		depth := indent(lines[i-1]) // the Custom Scan (Citus INSERT ... SELECT) it belongs to
		for _, below := range lines[i+1:] {
			if indent(below) <= depth {
				break
			}
			if strings.Contains(below, "Custom Scan (Citus Adaptive)") {
				return true
			}
		}
	}
	return false
}

func indent(line string) int { return len(line) - len(strings.TrimLeft(line, " ")) }

// onKeyedTable: a plan on the tables distributed by a key of their own (a claim, an event), whose
// shard is the key's, not the account's.
func onKeyedTable(plan string) bool {
	return strings.Contains(plan, "dedupe_claims") || strings.Contains(plan, "stripe_events")
}

var shardName = regexp.MustCompile(`\b(accounts|ledger|holds|decisions|topups|credit_lots|lot_draws|lot_refills|lot_debts)_(\d{6,})\b`)

// accountShardsTouched maps the shards of account tables the commands name to their hash range: the
// colocated shards of one account share it.
func accountShardsTouched(t *testing.T, pool *pgxpool.Pool, commands []string) map[string]bool {
	t.Helper()
	ranges := map[string]bool{}
	for _, c := range commands {
		for _, m := range shardName.FindAllStringSubmatch(c, -1) {
			var min string
			if err := pool.QueryRow(context.Background(), `SELECT shardminvalue FROM pg_dist_shard WHERE shardid = $1::bigint`, m[2]).Scan(&min); err != nil {
				t.Fatalf("shard %s: %v", m[0], err)
			}
			ranges[min] = true
		}
	}
	return ranges
}

// Restores of accounts of one shard in one call, from connections of their own: each restore's lot work
// runs on the shard, in the trigger (ledger_lots_apply → lots_apply_entry). Citus names a distributed
// subplan's result {plan}_{subplan}, with plan numbers counted per process, in a directory the whole
// distributed transaction shares on every node; so a statement the trigger plans with a subplan can
// replace the rows of a coordinator's subplan of the same name. A new connection numbers its plans from
// the start on the coordinator and on the workers alike, and one of these calls lines the two up: with
// the restore of schema version 24 (one statement of CTEs), ledger_append failed "row field count is 2, expected 6"
// reading its planned rows back after the insert.
func TestCitusShardTriggersPlanNoSubplans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.URL(t)
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// Accounts on the shard of the first, each with a paid credit of 1000 refunded by 600.
	const perCall = 8
	var accounts []string
	for i := 0; len(accounts) < perCall*(perCall+1)/2; i++ {
		id := fmt.Sprintf("acct_restore_%03d", i)
		var same bool
		if err := pool.QueryRow(ctx, `SELECT get_shard_id_for_distribution_column('accounts', $1::text)
			= get_shard_id_for_distribution_column('accounts', 'acct_restore_000'::text)`, id).Scan(&same); err != nil {
			t.Fatal(err)
		}
		if !same {
			continue
		}
		accounts = append(accounts, id)
		if _, err := pool.Exec(ctx, `INSERT INTO accounts (id, currency) VALUES ($1, 'usd')`, id); err != nil {
			t.Fatal(err)
		}
		for _, p := range []struct {
			kind   string
			amount int64
		}{{"topup", 1000}, {"refund", -600}} {
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM ledger_append(ARRAY[$1], ARRAY[$2], ARRAY[$3::bigint], ARRAY[''],
				ARRAY[$2 || ':' || $1], ARRAY['pi_' || $1])`, id, p.kind, p.amount).Scan(&n); err != nil || n != 1 {
				t.Fatalf("%s of %s: %d entries, %v", p.kind, id, n, err)
			}
		}
	}

	// Calls restoring 1, 2, ... 8 of them at once, each from a new connection.
	rest := accounts
	for n := 1; n <= perCall; n++ {
		ids := rest[:n]
		rest = rest[n:]
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		var posted int
		err = conn.QueryRow(ctx, `
			SELECT count(*)
			FROM ledger_append($1::text[], array_fill('refund_restore'::text, ARRAY[cardinality($1::text[])]),
			                   array_fill(600::bigint, ARRAY[cardinality($1::text[])]),
			                   array_fill(''::text, ARRAY[cardinality($1::text[])]),
			                   ARRAY(SELECT 'restore:' || x FROM unnest($1::text[]) x),
			                   ARRAY(SELECT 'pi_' || x FROM unnest($1::text[]) x),
			                   p_reverses => ARRAY(SELECT 'refund:' || x FROM unnest($1::text[]) x))`, ids).Scan(&posted)
		conn.Close(ctx)
		if err != nil || posted != n {
			t.Fatalf("restoring %d accounts of one shard in one call: %d entries, %v", n, posted, err)
		}
	}
	var refills, refilled int64
	if err := pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(amount), 0) FROM lot_refills WHERE account_id LIKE 'acct_restore_%'`).
		Scan(&refills, &refilled); err != nil {
		t.Fatal(err)
	}
	if want := int64(len(accounts)); refills != want || refilled != 600*want {
		t.Errorf("%d refills of %d credits, want %d of %d", refills, refilled, want, 600*want)
	}
}

// claim_keys claims up to 1,000 keys with one INSERT … VALUES and more with an INSERT … SELECT: either
// way a call returns the keys that are new and those its own account claimed before, never one another
// account holds, and leaves every new key claimed for its account.
func TestCitusClaimsAnswerAlikeAtAnySize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := db.Open(ctx, dbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	claim := func(keys []string, account string) map[string]bool {
		t.Helper()
		accounts := make([]string, len(keys))
		for i := range accounts {
			accounts[i] = account
		}
		rows, err := pool.Query(ctx, `SELECT k FROM claim_keys($1::text[], $2::text[]) AS k`, keys, accounts)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("claim %d keys: %v", len(keys), err)
		}
		claimed := map[string]bool{}
		for _, k := range got {
			claimed[k] = true
		}
		return claimed
	}
	for _, n := range []int{1, 3, 999, 1000, 1001, 2500} {
		// A third of the keys claimed by acct_own before, a third by acct_other, a third new.
		var own, other, fresh []string
		for i := 0; i < n; i++ {
			key := fmt.Sprintf("claim:%d:%d", n, i)
			switch i % 3 {
			case 0:
				fresh = append(fresh, key)
			case 1:
				own = append(own, key)
			default:
				other = append(other, key)
			}
		}
		if len(own) > 0 && len(claim(own, "acct_own")) != len(own) {
			t.Fatalf("n=%d: acct_own's first claim", n)
		}
		if len(other) > 0 && len(claim(other, "acct_other")) != len(other) {
			t.Fatalf("n=%d: acct_other's first claim", n)
		}
		all := append(append(append([]string{}, fresh...), own...), other...)
		got := claim(all, "acct_own")
		for _, k := range fresh {
			if !got[k] {
				t.Errorf("n=%d: new key %s not claimed", n, k)
			}
		}
		for _, k := range own {
			if !got[k] {
				t.Errorf("n=%d: key %s, claimed by its own account before, not returned", n, k)
			}
		}
		for _, k := range other {
			if got[k] {
				t.Errorf("n=%d: key %s, held by acct_other, claimed for acct_own", n, k)
			}
		}
		if len(got) != len(fresh)+len(own) {
			t.Errorf("n=%d: %d keys returned, want %d", n, len(got), len(fresh)+len(own))
		}
		var stored int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM dedupe_claims WHERE dedupe_key = ANY($1) AND account_id = 'acct_own'`,
			fresh).Scan(&stored); err != nil || stored != len(fresh) {
			t.Errorf("n=%d: %d of %d new keys stored for acct_own (%v)", n, stored, len(fresh), err)
		}
	}
}
