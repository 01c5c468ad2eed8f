package db_test

import (
	"context"
	"errors"
	"io/fs"
	"strings"
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
	// River's job tables stay: Down reverts only ours. So do an extension's objects (Citus's views).
	rows, err := pool.Query(ctx, `
		SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relname NOT LIKE 'schema_migrations%' AND c.relname NOT LIKE 'river\_%'
			AND c.relkind IN ('r', 'i', 'S', 'v')
			AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')
		UNION ALL
		SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = 'public' AND p.proname NOT LIKE 'river\_%'
			AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')`)
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
	// On a cluster the tables are distributed again: down took the distribute step's objects too.
	if distributed, err := db.Distributed(ctx, pool); err != nil || distributed != dbtest.OnCitus() {
		t.Fatalf("after up again: distributed %t (%v), want %t", distributed, err, dbtest.OnCitus())
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

// A database at a version the baseline folded in is refused before anything runs, up or down, with
// the way to upgrade it: this binary has no step from there.
func TestMigrateRefusesADatabaseFromBeforeTheBaseline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.URL(t)
	ms, err := db.OpenMigrations(url)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	// An empty schema that says it is at 17, as a database from before the baseline does.
	if err := ms.Down(1); err != nil {
		t.Fatalf("down to nothing: %v", err)
	}
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `INSERT INTO schema_migrations (version, dirty) VALUES (17, false)`); err != nil {
		t.Fatal(err)
	}

	if err := ms.Up(); !errors.Is(err, db.ErrBeforeBaseline) || !strings.Contains(err.Error(), "Upgrading from before the baseline") {
		t.Fatalf("migrate up from 17 = %v, want ErrBeforeBaseline naming the way to upgrade", err)
	}
	if err := ms.Down(1); !errors.Is(err, db.ErrBeforeBaseline) {
		t.Fatalf("migrate down from 17 = %v, want ErrBeforeBaseline", err)
	}
	var (
		version int
		dirty   bool
		ledger  bool
	)
	if err := pool.QueryRow(ctx, `SELECT version, dirty, to_regclass('ledger') IS NOT NULL FROM schema_migrations`).Scan(&version, &dirty, &ledger); err != nil {
		t.Fatal(err)
	}
	if version != 17 || dirty || ledger {
		t.Fatalf("after the refusals: version %d, dirty %t, ledger created %t; want 17, clean, nothing created", version, dirty, ledger)
	}
}

// migrate down past the baseline drops every table, so it is refused while the ledger holds an entry,
// and the refusal leaves the schema as it was, at its version and clean (nothing to force afterwards).
func TestMigrateDownKeepsALedgerWithEntries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.URL(t)
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_kept", "usd", 100); err != nil {
		t.Fatal(err)
	}
	ms, err := db.OpenMigrations(url)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	if err := ms.Down(1); !errors.Is(err, db.ErrLedgerNotEmpty) {
		t.Fatalf("migrate down 1 over a ledger with entries = %v, want ErrLedgerNotEmpty", err)
	}
	if err := db.CheckSchema(ctx, pool); err != nil {
		t.Fatalf("after the refusal: %v", err)
	}
	var balance int64
	if err := pool.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = 'acct_kept'`).Scan(&balance); err != nil || balance != 100 {
		t.Fatalf("the account after the refusal: balance %d, %v", balance, err)
	}

	// The baseline's down file refuses on its own too, for whoever runs it by hand.
	down, err := fs.ReadFile(migrations.FS, "000031_baseline.down.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, string(down)); err == nil || !strings.Contains(err.Error(), "the ledger holds entries") {
		t.Fatalf("the baseline's down file over a ledger with entries = %v, want its refusal", err)
	}
}
