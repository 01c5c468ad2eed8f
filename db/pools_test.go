package db_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
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

// detailConstraint finds the constraint our triggers name in their detail (the one field Citus relays
// from a shard).
var detailConstraint = regexp.MustCompile(`^constraint (\w+) on table \w+$`)

// treeViolated returns the constraint err names: the server's constraint field, or on Citus the shard's
// message (a CHECK) or detail (a trigger's refusal).
func treeViolated(err error) string {
	if name := checkViolated(err); name != "" {
		return name
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return ""
	}
	if pgErr.ConstraintName != "" {
		return citusShardSuffix.ReplaceAllString(pgErr.ConstraintName, "")
	}
	if m := detailConstraint.FindStringSubmatch(pgErr.Detail); m != nil {
		return m[1]
	}
	return ""
}

// The tree of pools is held by the database itself: rows written directly, past the API, are refused
// by the named constraint for each rule (SPEC §18).
func TestAccountsTreeRefusedByTheDatabase(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	for _, stmt := range []string{
		`INSERT INTO accounts (id, currency) VALUES ('org', 'usd'), ('other', 'eur')`,
		`INSERT INTO accounts (id, currency, parent_id) VALUES ('team', 'usd', 'org')`,
		`INSERT INTO accounts (id, currency, parent_id) VALUES ('member', 'usd', 'team')`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	for _, c := range []struct{ name, stmt, constraint string }{
		{"its own parent", `INSERT INTO accounts (id, currency, parent_id) VALUES ('self', 'usd', 'self')`,
			"accounts_parent_not_self_check"},
		{"a parent that does not exist", `INSERT INTO accounts (id, currency, parent_id) VALUES ('orphan', 'usd', 'nobody')`,
			"accounts_parent_fk"},
		{"a parent of another currency", `INSERT INTO accounts (id, currency, parent_id) VALUES ('euro', 'eur', 'org')`,
			"accounts_parent_currency_check"},
		{"a parent of another unit", `INSERT INTO accounts (id, currency, unit, parent_id) VALUES ('credits', 'usd', 'credits', 'org')`,
			"accounts_parent_currency_check"},
		{"a fourth level", `INSERT INTO accounts (id, currency, parent_id) VALUES ('deep', 'usd', 'member')`,
			"accounts_depth_check"},
		{"a cycle", `UPDATE accounts SET parent_id = 'member' WHERE id = 'org'`, "accounts_parent_acyclic_check"},
		{"a parent set later", `UPDATE accounts SET parent_id = 'org' WHERE id = 'other'`, "accounts_parent_currency_check"},
		{"a parent changed", `UPDATE accounts SET parent_id = 'org' WHERE id = 'member'`, "accounts_parent_immutable"},
		{"a parent taken away", `UPDATE accounts SET parent_id = NULL WHERE id = 'team'`, "accounts_parent_immutable"},
		{"a pool's currency changed", `UPDATE accounts SET currency = 'eur' WHERE id = 'org'`, "accounts_parent_currency_check"},
		{"a member's currency changed", `UPDATE accounts SET currency = 'eur' WHERE id = 'member'`, "accounts_parent_currency_check"},
		{"a pool deleted", `DELETE FROM accounts WHERE id = 'team'`, "accounts_parent_fk"},
	} {
		_, err := pool.Exec(ctx, c.stmt)
		if got := treeViolated(err); got != c.constraint {
			t.Errorf("%s: refused by %q (%v), want %q", c.name, got, err, c.constraint)
		}
	}
	// The depth is derived from the parent, whatever the row says.
	if _, err := pool.Exec(ctx, `INSERT INTO accounts (id, currency, depth) VALUES ('lying', 'usd', 1)`); err != nil {
		t.Fatal(err)
	}
	var depths string
	if err := pool.QueryRow(ctx, `SELECT string_agg(id || '=' || depth || ':' || coalesce(parent_id, '-'), ' ' ORDER BY id)
	        FROM accounts`).Scan(&depths); err != nil {
		t.Fatal(err)
	}
	if want := "lying=0:- member=2:team org=0:- other=0:- team=1:org"; depths != want {
		t.Fatalf("tree %s, want %s", depths, want)
	}
}

// CreateMember answers each refusal of the tree with its sentinel, and a repeated creation with the
// same parent as a replay.
func TestCreateMemberAnswers(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	l := dbtest.Ledger(t, pool)
	for _, a := range [][3]string{{"org", "usd", ""}, {"team", "usd", "org"}, {"member", "usd", "team"}} {
		if _, err := l.CreateMember(ctx, a[0], a[1], a[2], 0); err != nil {
			t.Fatalf("create %s: %v", a[0], err)
		}
	}
	again, err := l.CreateMember(ctx, "member", "usd", "team", 0)
	if err != nil || again.Created || again.Account.ParentID != "team" {
		t.Fatalf("replay: %+v, %v", again, err)
	}
	for _, c := range []struct {
		id, currency, parent string
		want                 error
	}{
		{"member", "usd", "org", db.ErrParentImmutable},
		{"member", "usd", "", db.ErrParentImmutable},
		{"org", "usd", "team", db.ErrParentImmutable},
		{"orphan", "usd", "nobody", db.ErrParentNotFound},
		{"euro", "eur", "org", db.ErrCurrencyMismatch},
		{"deep", "usd", "member", db.ErrTreeTooDeep},
	} {
		if _, err := l.CreateMember(ctx, c.id, c.currency, c.parent, 0); !errors.Is(err, c.want) {
			t.Errorf("create %s under %q: %v, want %v", c.id, c.parent, err, c.want)
		}
	}
	// A member counts what its pool counts: one counted in credits under a pool counted in dollars is refused.
	if _, err := l.CreateMemberIn(ctx, "credits", "usd", db.UnitCredits, "org", 0); !errors.Is(err, db.ErrCurrencyMismatch) {
		t.Errorf("create credits under org: %v, want %v", err, db.ErrCurrencyMismatch)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM accounts`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d accounts (%v), want 3", n, err)
	}
}

// A three-level tree under 64 concurrent debits, billed by overlapping chunks racing each other: no pool
// ever goes below zero, every decision's parts sum to its cost exactly once, and every part equals what
// a serial replay of the billed chunks, in their commit order and decision seq order within each, pays
// (SPEC §18).
func TestCascadeUnderConcurrentDebits(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	l := dbtest.Ledger(t, pool)
	tree := []struct {
		id, parent string
		grant      int64
	}{
		{"org", "", 900}, {"team_a", "org", 300}, {"team_b", "org", 0},
		{"m1", "team_a", 40}, {"m2", "team_a", 0}, {"m3", "team_b", 25}, {"m4", "org", 10},
	}
	parents := map[string]string{}
	available := map[string]int64{}
	for _, a := range tree {
		if _, err := l.CreateMember(ctx, a.id, "usd", a.parent, a.grant); err != nil {
			t.Fatalf("create %s: %v", a.id, err)
		}
		parents[a.id], available[a.id] = a.parent, a.grant
	}
	spenders := []string{"m1", "m2", "m3", "m4", "team_a", "org"}

	const debits = 64
	var wg sync.WaitGroup
	chunks := make(chan db.BilledChunk, debits+1)
	errs := make(chan error, debits)
	for i := range debits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := db.Decision{ID: fmt.Sprintf("d%02d", i), AccountID: spenders[i%len(spenders)], Cost: int64(7 + i%5*9), OccurredAt: time.Now()}
			if _, err := db.StoreDecisions(ctx, pool, []db.Decision{d}); err != nil {
				errs <- err
				return
			}
			last, err := db.LastDecisionSeq(ctx, pool)
			if err != nil {
				errs <- err
				return
			}
			// Overlapping windows: each chunk re-reads decisions others may be billing.
			chunk, err := l.BillChunk(ctx, max(0, last-int64(1+i%9)), last, 1+i%7)
			if err != nil {
				errs <- err
				return
			}
			chunks <- chunk
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	last, err := db.LastDecisionSeq(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	final, err := l.BillChunk(ctx, 0, last, 1000)
	if err != nil {
		t.Fatal(err)
	}
	chunks <- final
	close(chunks)

	// The serial replay: chunks in commit order (a chunk's entries all follow the previous one's: each
	// locked the tree's root), decisions in seq order within a chunk, each paid greedily up the tree.
	type billedChunk struct {
		first     int64
		decisions map[string]bool
	}
	var billed []billedChunk
	parts := map[string]map[string]int64{} // decision -> account -> paid
	for c := range chunks {
		if len(c.Posted) == 0 {
			continue
		}
		b := billedChunk{first: c.Posted[0].ID, decisions: map[string]bool{}}
		for _, e := range c.Posted {
			b.first = min(b.first, e.ID)
			id := strings.TrimPrefix(e.DedupeKey, "decision:")
			if e.OnBehalfOf != "" {
				id = strings.TrimSuffix(id, "@"+e.AccountID)
			}
			b.decisions[id] = true
			if parts[id] == nil {
				parts[id] = map[string]int64{}
			}
			if _, twice := parts[id][e.AccountID]; twice {
				t.Fatalf("decision %s posted twice on %s", id, e.AccountID)
			}
			parts[id][e.AccountID] = -e.Amount
		}
		billed = append(billed, b)
	}
	slices.SortFunc(billed, func(a, b billedChunk) int { return cmp.Compare(a.first, b.first) })
	rows, err := pool.Query(ctx, `SELECT id, account_id, cost FROM decisions ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	type decision struct {
		ID, Account string
		Cost        int64
	}
	decisions, err := pgx.CollectRows(rows, pgx.RowToStructByPos[decision])
	if err != nil || len(decisions) != debits {
		t.Fatalf("%d decisions (%v), want %d", len(decisions), err, debits)
	}
	billedOnce := map[string]bool{}
	for _, b := range billed {
		for _, d := range decisions {
			if !b.decisions[d.ID] {
				continue
			}
			if billedOnce[d.ID] {
				t.Fatalf("decision %s billed by two chunks", d.ID)
			}
			billedOnce[d.ID] = true
			want, rest := map[string]int64{d.Account: 0}, d.Cost
			for payer := d.Account; payer != "" && rest > 0; payer = parents[payer] {
				paid := min(rest, max(available[payer], 0))
				if paid > 0 || payer == d.Account {
					want[payer] += paid
				}
				available[payer] -= paid
				rest -= paid
			}
			want[d.Account] += rest // what no level could pay, the member owes
			available[d.Account] -= rest
			if fmt.Sprint(want) != fmt.Sprint(parts[d.ID]) {
				t.Errorf("decision %s (%d on %s): parts %v, a serial replay pays %v", d.ID, d.Cost, d.Account, parts[d.ID], want)
			}
			var sum int64
			for _, p := range parts[d.ID] {
				sum += p
			}
			if sum != d.Cost {
				t.Errorf("decision %s: parts sum to %d, cost %d", d.ID, sum, d.Cost)
			}
		}
	}
	if len(billedOnce) != debits {
		t.Fatalf("%d decisions billed, want %d", len(billedOnce), debits)
	}
	for _, a := range tree {
		acct, err := db.GetAccount(ctx, pool, a.id)
		if err != nil {
			t.Fatal(err)
		}
		if acct.Balance != available[a.id] {
			t.Errorf("%s: balance %d, a serial replay leaves %d", a.id, acct.Balance, available[a.id])
		}
	}
	// A pool pays a member's part only from what it has: its own decisions alone may take it below zero
	// (billed in full, as any account's).
	var overdrawnByPools int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM ledger WHERE on_behalf_of IS NOT NULL AND balance_after < 0`).Scan(&overdrawnByPools); err != nil || overdrawnByPools != 0 {
		t.Fatalf("%d pool entries left their pool below zero (%v)", overdrawnByPools, err)
	}
	if again, err := l.BillChunk(ctx, 0, last, 1000); err != nil || len(again.Posted) != 0 {
		t.Fatalf("a replay posted %d parts (%v), want none", len(again.Posted), err)
	}
	verifyClean(t, pool)
}

// A decision its member paid alone is never billed again, not even as a part its pools would pay now
// that the member's own available is gone: a replay posts none of its parts (SPEC §18).
func TestCascadeReplayPostsNoPart(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	l := dbtest.Ledger(t, pool)
	createTree(t, l, [3]string{"org", "", "500"}, [3]string{"member", "org", "100"})
	first := billDecisions(t, pool, l, db.Decision{ID: "d1", AccountID: "member", Cost: 60})
	if len(first.Posted) != 1 || first.Posted[0].Amount != -60 {
		t.Fatalf("first billing: %+v; want the member's 60", first.Posted)
	}
	// The member spends the rest of its own: a new plan of d1 would be the pool's.
	if _, err := pool.Exec(ctx, `SELECT ledger_append('{member}', '{adjustment}', '{-40}', '{spent}', '{adj:1}')`); err != nil {
		t.Fatal(err)
	}
	// A new decision in the same window: the chunk is billed again, d1 with it.
	again := billDecisions(t, pool, l, db.Decision{ID: "d2", AccountID: "member", Cost: 30})
	var keys []string
	for _, e := range again.Posted {
		keys = append(keys, fmt.Sprintf("%s:%s:%d", e.DedupeKey, e.AccountID, e.Amount))
	}
	if want := "decision:d2:member:0 decision:d2@org:org:-30"; strings.Join(keys, " ") != want {
		t.Fatalf("re-billing posted %v, want %s (nothing of d1)", keys, want)
	}
	if org, err := db.GetAccount(ctx, pool, "org"); err != nil || org.Balance != 470 {
		t.Fatalf("org: %+v, %v; want 470: only d2 drawn", org, err)
	}
	verifyClean(t, pool)
}

// verify finds a pool's part whose member has no entry of the effect, and parts that do not sum to what
// the decision billed (SPEC §18).
func TestVerifyFindsBrokenCascades(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	l := dbtest.Ledger(t, pool)
	createTree(t, l, [3]string{"org", "", "100"}, [3]string{"member", "org", "100"})
	billDecisions(t, pool, l, db.Decision{ID: "d1", AccountID: "member", Cost: 150})
	verifyClean(t, pool)
	// Parts posted past billing, through the one road: a pool's part of an effect its member never had,
	// and one more part of d1.
	if _, err := pool.Exec(ctx, `SELECT ledger_append('{org,org}', '{usage,usage}', '{-5,-7}', '{x,y}',
	        '{decision:ghost@org,decision:d1@org:again}', p_on_behalf_of => '{member,member}')`); err != nil {
		t.Fatal(err)
	}
	violations, err := db.Verify(ctx, pool, time.Now(), time.Hour, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var cascades []string
	for _, v := range violations {
		if v.Check == "cascade" {
			cascades = append(cascades, v.Detail)
		}
	}
	if len(cascades) != 2 || !strings.Contains(cascades[0], "decision:d1: ") || !strings.Contains(cascades[0], "sum to 157, billed 150") ||
		!strings.Contains(cascades[1], "decision:ghost: ") || !strings.Contains(cascades[1], "has 0 entries") {
		t.Fatalf("cascade violations %q, want d1's parts summing to 157 of 150 and ghost's missing member entry", cascades)
	}
}

// A member's hard limit bounds what it draws from any level: an authorisation past it is refused with
// limit_exceeded while its pool has the funds, and a decision its pool paid part of counts in full on the
// member's window (SPEC §18, §16).
func TestMemberLimitBoundsWhatItDrawsFromAnyLevel(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	l := dbtest.Ledger(t, pool)
	createTree(t, l, [3]string{"org", "", "1000"}, [3]string{"member", "org", "100"})
	if err := db.PutLimit(ctx, pool, "member", "monthly", db.LimitDefinition{Scope: "account", Period: "month", Mode: "hard", Amount: 50}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AuthoriseHold(ctx, pool, "member", db.HoldRequest{ID: "h1", Amount: 60, ExpiresIn: time.Hour}); !errors.Is(err, db.ErrLimitExceeded) {
		t.Fatalf("a hold past the member's cap: %v, want limit exceeded", err)
	}
	billed := billDecisions(t, pool, l, db.Decision{ID: "d1", AccountID: "member", Cost: 150})
	if billed.OverLimit != 100 {
		t.Fatalf("over the cap %d, want 100: the decision's 150 (100 own, 50 from the pool) against 50", billed.OverLimit)
	}
	if w := currentWindow(t, pool, "member", "monthly"); w.Spent != 150 {
		t.Fatalf("member's window spent %d, want 150", w.Spent)
	}
	verifyClean(t, pool)
}

// createTree creates each {id, parent, grant} in order, a member of its parent ("" for a root).
func createTree(t *testing.T, l *db.Ledger, accounts ...[3]string) {
	t.Helper()
	for _, a := range accounts {
		grant, err := strconv.ParseInt(a[2], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.CreateMember(context.Background(), a[0], "usd", a[1], grant); err != nil {
			t.Fatalf("create %s under %q: %v", a[0], a[1], err)
		}
	}
}

// billDecisions stores the decisions (occurred now), then bills every decision stored so far in one chunk.
func billDecisions(t *testing.T, pool *pgxpool.Pool, l *db.Ledger, decisions ...db.Decision) db.BilledChunk {
	t.Helper()
	ctx := context.Background()
	for i := range decisions {
		decisions[i].OccurredAt = time.Now()
	}
	if _, err := db.StoreDecisions(ctx, pool, decisions); err != nil {
		t.Fatal(err)
	}
	last, err := db.LastDecisionSeq(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	billed, err := l.BillChunk(ctx, 0, last, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return billed
}
