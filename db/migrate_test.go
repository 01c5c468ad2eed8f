package db_test

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"testing"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/sql/migrations"
)

// Every migration goes down cleanly and comes back: up, down to nothing, up again.
func TestMigrationsRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.URL(t) // already up
	// Down counts steps, not versions: as many steps as there are migrations (numbers may skip).
	ups, err := fs.Glob(migrations.FS, "*.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := db.OpenMigrations(url)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()

	if err := ms.Down(len(ups)); err != nil {
		t.Fatalf("down %d: %v", len(ups), err)
	}
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var leftovers []string
	// River's job tables stay: Down reverts only ours.
	rows, err := pool.Query(ctx, `
		SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relname NOT LIKE 'schema_migrations%' AND c.relname NOT LIKE 'river\_%'
			AND c.relkind IN ('r', 'i', 'S', 'v')
		UNION ALL
		SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = 'public' AND p.proname NOT LIKE 'river\_%'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		leftovers = append(leftovers, name)
	}
	if len(leftovers) > 0 {
		t.Fatalf("after migrating all the way down, left behind: %v", leftovers)
	}

	if err := ms.Up(); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if err := db.CheckSchema(ctx, pool); err != nil {
		t.Fatalf("after up again: %v", err)
	}
}

// migrate up also brings River's job tables, at River's latest version, in the same database.
func TestMigrationsUpIncludesRiver(t *testing.T) {
	t.Parallel()
	ms, err := db.OpenMigrations(dbtest.URL(t)) // already up
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	rm, err := db.NewRiverMigrator(nil)
	if err != nil {
		t.Fatal(err)
	}
	all := rm.AllVersions()
	got, err := ms.RiverVersion()
	if err != nil {
		t.Fatal(err)
	}
	if want := all[len(all)-1].Version; got != want {
		t.Fatalf("river version after migrate up = %d, want %d", got, want)
	}
}

// Migration 000009 turns each account's balance into lots of the credits still unspent, the oldest
// spent first, and a negative balance into the debt of its newest debits; verify finds the result
// sound, and the next credit repays that debt oldest first.
func TestMigrationCreditLotsBackfill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.URL(t)
	ms, err := db.OpenMigrations(url)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	if err := ms.Down(stepsAbove(t, 8)); err != nil {
		t.Fatalf("down to 000008, below the lots: %v", err)
	}
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// Accounts as schema 8 holds them (today's insert names columns of later migrations).
	if _, err := pool.Exec(ctx, `INSERT INTO accounts (id, currency) VALUES ('rich', 'usd'), ('owing', 'usd')`); err != nil {
		t.Fatal(err)
	}
	for _, p := range []db.Posting{
		{AccountID: "rich", Kind: db.KindTopup, Amount: 100, DedupeKey: "t1"},
		{AccountID: "rich", Kind: db.KindGrant, Amount: 50, DedupeKey: "g1"},
		{AccountID: "rich", Kind: db.KindUsage, Amount: -120, DedupeKey: "u1"},
		{AccountID: "rich", Kind: db.KindTopup, Amount: 80, DedupeKey: "t2"},
		{AccountID: "owing", Kind: db.KindTopup, Amount: 10, DedupeKey: "t3"},
		{AccountID: "owing", Kind: db.KindUsage, Amount: -25, DedupeKey: "u2"},
		{AccountID: "owing", Kind: db.KindUsage, Amount: -5, DedupeKey: "u3"},
	} {
		postOnSchema8(t, pool, p)
	}
	if err := ms.Up(); err != nil {
		t.Fatalf("up: %v", err)
	}

	lots, err := db.Lots(ctx, pool, "rich", true, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range lots {
		got = append(got, fmt.Sprintf("%s %d/%d", l.Category, l.Remaining, l.Amount))
	}
	// t1 was spent first, then 20 of the grant; t2 is whole.
	if fmt.Sprint(got) != "[promotional 30/30 paid 80/80]" {
		t.Fatalf("rich's lots: %v", got)
	}
	if lots, _ := db.Lots(ctx, pool, "owing", true, 100); len(lots) != 0 {
		t.Fatalf("owing's lots: %+v", lots)
	}
	if d := debt(t, pool, "owing"); d != 20 {
		t.Fatalf("owing's debt %d, want 20", d)
	}
	verifyClean(t, pool)

	// The next credit repays u2's 15 (older) before u3's 5.
	top := mustPost(t, pool, db.Posting{AccountID: "owing", Kind: db.KindTopup, Amount: 30, DedupeKey: "t4"})
	lot := lotOf(t, pool, "owing", top)
	var u2, u3 int64
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT d.amount FROM lot_draws d JOIN ledger l ON l.id = d.entry_id WHERE l.dedupe_key = 'u2' AND d.lot_id = $1),
		(SELECT d.amount FROM lot_draws d JOIN ledger l ON l.id = d.entry_id WHERE l.dedupe_key = 'u3' AND d.lot_id = $1)`, lot.ID).Scan(&u2, &u3); err != nil {
		t.Fatal(err)
	}
	if u2 != 15 || u3 != 5 || lot.Remaining != 10 {
		t.Fatalf("repaid u2 %d and u3 %d, %d left; want 15, 5 and 10", u2, u3, lot.Remaining)
	}
	verifyClean(t, pool)
}

// postOnSchema8 posts as the ledger of migration 000008 took entries (before the lots and the one road,
// which the test migrates to afterwards): numbered from the locked account row.
func postOnSchema8(t *testing.T, pool *db.Pool, p db.Posting) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
		INSERT INTO ledger (account_id, kind, amount, dedupe_key, seq, balance_after)
		SELECT id, $2, $3, $4, last_seq + 1, balance + $3 FROM accounts WHERE id = $1 FOR NO KEY UPDATE`,
		p.AccountID, p.Kind, p.Amount, p.DedupeKey)
	if err != nil {
		t.Fatalf("post %+v: %v", p, err)
	}
}

// stepsAbove counts the migrations numbered above version: the steps down to it (numbers may skip, as
// when a branch's migration is renumbered at merge).
func stepsAbove(t *testing.T, version int) int {
	t.Helper()
	ups, err := fs.Glob(migrations.FS, "*.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	steps := 0
	for _, name := range ups {
		n, err := strconv.Atoi(name[:6])
		if err != nil {
			t.Fatalf("migration %s: %v", name, err)
		}
		if n > version {
			steps++
		}
	}
	return steps
}
