package db_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

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
	ups := upFiles(t)
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
			AND c.relkind IN ('r', 'p', 'i', 'S', 'v', 'm', 'f')
			AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')
		UNION ALL
		SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = 'public' AND p.proname NOT LIKE 'river\_%'
			AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
		UNION ALL
		-- Types of our own (a table's row type goes with its table, an array type with its element).
		SELECT t.typname FROM pg_type t
		WHERE t.typnamespace = 'public'::regnamespace AND t.typtype NOT IN ('c', 'b') AND t.typname NOT LIKE 'river\_%'
			AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_type'::regclass AND d.objid = t.oid AND d.deptype = 'e')`)
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
	if dbtest.OnCitus() {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_dist_partition
			WHERE logicalrelid IN ('ledger'::regclass, 'accounts'::regclass, 'dedupe_claims'::regclass)`).Scan(&n); err != nil || n != 3 {
			t.Fatalf("after up again: %d of ledger, accounts and dedupe_claims distributed (%v), want 3", n, err)
		}
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
	ups := upFiles(t)
	if err := ms.Down(len(ups)); err != nil {
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

// migrate down past the baseline drops every table, so it is refused while any of them holds a row (an
// entry, or only an audit record), and so are more steps than were applied; each refusal leaves the
// schema as it was, at its version and clean (nothing to force afterwards).
func TestMigrateDownKeepsADatabaseWithRows(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		row  func(ctx context.Context, pool *pgxpool.Pool) error
	}{
		{"an entry", func(ctx context.Context, pool *pgxpool.Pool) error {
			_, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_kept", "usd", 100)
			return err
		}},
		{"an audit record only", func(ctx context.Context, pool *pgxpool.Pool) error {
			return db.RecordAudit(ctx, pool, db.AuditRecord{KeyName: "ops", Action: "POST /v1/decisions", Status: 201, Outcome: "ok"})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url := dbtest.URL(t)
			pool, err := db.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			if err := c.row(ctx, pool); err != nil {
				t.Fatal(err)
			}
			ms, err := db.OpenMigrations(url)
			if err != nil {
				t.Fatal(err)
			}
			defer ms.Close()
			ups := upFiles(t)
			if err := ms.Down(len(ups)); !errors.Is(err, db.ErrSchemaNotEmpty) {
				t.Fatalf("migrate down %d over a schema with rows = %v, want ErrSchemaNotEmpty", len(ups), err)
			}
			if err := ms.Down(len(ups) + 1); err == nil || !strings.Contains(err.Error(), "applied") {
				t.Fatalf("migrate down %d, one more than applied = %v, want a refusal", len(ups)+1, err)
			}
			if err := db.CheckSchema(ctx, pool); err != nil {
				t.Fatalf("after the refusals: %v", err)
			}
			var rows int
			if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM accounts) + (SELECT count(*) FROM audit_log)`).Scan(&rows); err != nil || rows != 1 {
				t.Fatalf("after the refusals: %d rows (%v), want the one written", rows, err)
			}

			// The baseline's down file refuses on its own too, for whoever runs it by hand.
			down, err := fs.ReadFile(migrations.FS, "000031_baseline.down.sql")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, string(down)); err == nil || !strings.Contains(err.Error(), "holds rows") {
				t.Fatalf("the baseline's down file over a schema with rows = %v, want its refusal", err)
			}

			// The migrations after the baseline go down and up over the rows as always.
			if err := ms.Down(len(ups) - 1); err != nil {
				t.Fatalf("migrate down %d, to the baseline, over a schema with rows: %v", len(ups)-1, err)
			}
			if v, dirty, err := ms.Version(); err != nil || v != db.Baseline || dirty {
				t.Fatalf("after going down to the baseline: version %d, dirty %t (%v)", v, dirty, err)
			}
			if err := ms.Up(); err != nil {
				t.Fatalf("up again: %v", err)
			}
			if err := db.CheckSchema(ctx, pool); err != nil {
				t.Fatalf("after up again: %v", err)
			}
		})
	}
}

// The first embedded migration is the baseline, and every other one comes after it: a file numbered
// below it would run before any table exists on a new database.
func TestEmbeddedMigrationsStartAtTheBaseline(t *testing.T) {
	ups := upFiles(t)
	if len(ups) == 0 || ups[0] != fmt.Sprintf("%06d_baseline.up.sql", db.Baseline) {
		t.Fatalf("embedded migrations %v: the first must be %06d_baseline.up.sql", ups, db.Baseline)
	}
	for _, up := range ups[1:] {
		if v, err := strconv.ParseUint(up[:6], 10, 32); err != nil || uint(v) <= db.Baseline {
			t.Errorf("migration %s is not numbered after the baseline %d", up, db.Baseline)
		}
	}
}

// upFiles names the embedded up migrations in order; there are as many steps down to nothing (numbers
// may skip).
func upFiles(t *testing.T) []string {
	t.Helper()
	ups, err := fs.Glob(migrations.FS, "*.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	return ups
}
