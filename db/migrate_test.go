package db_test

import (
	"context"
	"io/fs"
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
	// Versions may leave gaps (numbers are handed out ahead of merging): count the steps.
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
