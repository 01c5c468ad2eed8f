package db_test

import (
	"context"
	"testing"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

// On plain PostgreSQL `migrate up` leaves the seed's schema exactly as the migrations wrote it: the
// distribute step runs only where the citus extension is (TestCitusDistributesTheSchema, in citus_cluster_test.go, tests that side).
func TestMigrateUpWithoutCitusKeepsTheSeedsGuarantees(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.URL(t)
	// Up again on a current database runs the distribute step's check once more.
	ms, err := db.OpenMigrations(url)
	if err != nil {
		t.Fatal(err)
	}
	if err := ms.Up(); err != nil {
		t.Fatal(err)
	}
	ms.Close()
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	var indexDef string
	var claims, citusForms bool
	err = pool.QueryRow(ctx, `
		SELECT pg_get_indexdef('ledger_dedupe_idx'::regclass),
		       to_regclass('dedupe_claims') IS NOT NULL,
		       to_regproc('shard_of') IS NOT NULL`).Scan(&indexDef, &claims, &citusForms)
	if err != nil {
		t.Fatal(err)
	}
	const seed = "CREATE UNIQUE INDEX ledger_dedupe_idx ON public.ledger USING btree (dedupe_key) WHERE (dedupe_key IS NOT NULL)"
	if indexDef != seed {
		t.Errorf("ledger_dedupe_idx is %q, want the seed's %q", indexDef, seed)
	}
	if claims || citusForms {
		t.Errorf("Citus changes on plain PostgreSQL: dedupe_claims present=%t, the trigger functions' Citus forms (shard_of) present=%t", claims, citusForms)
	}
}
