package db_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/sql/migrations"
)

// schema31 is the catalog of version 31 as versions 1 to 31 built it, one migration after the other: read
// with schemaCatalog, on PostgreSQL 15 (the server the project runs on), from a database where the up
// files of commit 7b36d44 (sql/migrations, the last to hold them) ran in order. It is never regenerated
// from the baseline, which it checks.
const schema31 = "testdata/schema_31.txt"

// The baseline creates, on an empty database, exactly the schema a database upgraded through versions
// 1 to 31 has: the same columns with their types, defaults and planner options, the same constraints
// (validated or NOT VALID), functions (their sources byte for byte), triggers, indexes and comments.
// Both kinds of database sit at 31, and later migrations start from either: the baseline is never
// edited, and a change of the schema is a new migration.
func TestBaselineIsTheSchemaOfVersion31(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbtest.EmptyURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	baseline, err := migrations.FS.ReadFile("000031_baseline.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, string(baseline)); err != nil {
		t.Fatalf("the baseline on an empty database: %v", err)
	}
	got := schemaCatalog(t, conn)
	want, err := os.ReadFile(schema31)
	if err != nil {
		t.Fatal(err)
	}
	if line, g, w, differ := dbtest.FirstDifference(got, string(want)); differ {
		t.Fatalf("the baseline's schema differs from version 31's (%s) at line %d:\n baseline: %s\n version 31: %s", schema31, line, g, w)
	}
}

// schemaCatalog describes every object of the public schema, a line each, sorted within each kind, so
// that two databases with the same schema describe it the same (object ids and the order objects were
// created in do not show).
func schemaCatalog(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	queries := []struct{ kind, sql string }{
		{"relation", `SELECT concat_ws(' ', c.relname, c.relkind::text, c.relpersistence::text,
			array_to_string(c.reloptions, ','), pg_get_indexdef(c.oid))
			FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace`},
		{"column", `SELECT concat_ws(' ', c.relname || '.' || a.attname, a.attnum, format_type(a.atttypid, a.atttypmod),
			a.attnotnull, a.attidentity::text, a.attstorage::text, a.attcompression::text, a.attcollation::regcollation,
			a.attstattarget,
			-- The planner's options only: the server may stamp options of its own on every column.
			array_to_string(ARRAY(SELECT o FROM unnest(a.attoptions) o WHERE o ~ '^n_distinct'), ','),
			pg_get_expr(d.adbin, d.adrelid))
			FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
			LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
			WHERE c.relnamespace = 'public'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped`},
		{"constraint", `SELECT concat_ws(' ', conname, conrelid::regclass, contype::text, convalidated, condeferrable,
			condeferred, pg_get_constraintdef(oid))
			-- NOT NULL is the column's (attnotnull); servers from 18 on list it here too.
			FROM pg_constraint WHERE connamespace = 'public'::regnamespace AND contype <> 'n'`},
		// The whole definition (language, volatility, strictness, cost, settings, body) as a digest.
		{"function", `SELECT concat_ws(' ', p.oid::regprocedure, md5(pg_get_functiondef(p.oid)))
			FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace`},
		{"type", `SELECT concat_ws(' ', t.typname, t.typtype::text, format_type(t.typbasetype, t.typtypmod))
			FROM pg_type t WHERE t.typnamespace = 'public'::regnamespace AND t.typtype NOT IN ('c', 'b')`},
		{"trigger", `SELECT concat_ws(' ', tgname, tgrelid::regclass, tgenabled::text, pg_get_triggerdef(oid))
			FROM pg_trigger WHERE NOT tgisinternal`},
		{"sequence", `SELECT concat_ws(' ', seqrelid::regclass, seqtypid::regtype, seqstart, seqincrement, seqmax, seqmin,
			seqcache, seqcycle) FROM pg_sequence`},
		{"comment", `SELECT pg_describe_object(classoid, objoid, objsubid) || ' = ' || description
			FROM pg_description WHERE objoid >= 16384`},
	}
	var b strings.Builder
	for _, q := range queries {
		rows, err := conn.Query(context.Background(), q.sql+` ORDER BY 1`)
		if err != nil {
			t.Fatalf("read the catalog's %ss: %v", q.kind, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("read the catalog's %ss: %v", q.kind, err)
		}
		for _, l := range lines {
			b.WriteString(q.kind + " " + strings.ReplaceAll(l, "\n", `\n`) + "\n")
		}
	}
	return b.String()
}
