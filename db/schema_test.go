package db_test

import (
	"context"
	"errors"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

// Every constraint, index, trigger and table of ours says, in a COMMENT ON, what it guarantees. An
// index backing a constraint is described by the constraint; River's tables and migrate's bookkeeping
// are not ours.
func TestEverySchemaObjectIsCommented(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	rows, err := pool.Query(context.Background(), `
		SELECT kind || ' ' || name FROM (
			SELECT 'table' AS kind, c.relname AS name, c.relname AS tbl, obj_description(c.oid, 'pg_class') AS descr
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
		UNION ALL
			SELECT 'constraint', con.conname || ' on ' || c.relname, c.relname, obj_description(con.oid, 'pg_constraint')
			FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'public' AND con.contype <> 'n'
		UNION ALL
			SELECT 'index', ic.relname, c.relname, obj_description(ic.oid, 'pg_class')
			FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_class c ON c.oid = i.indrelid
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'public'
			  AND NOT EXISTS (SELECT 1 FROM pg_constraint con WHERE con.conindid = i.indexrelid AND con.conrelid = i.indrelid)
		UNION ALL
			SELECT 'trigger', t.tgname || ' on ' || c.relname, c.relname, obj_description(t.oid, 'pg_trigger')
			FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'public' AND NOT t.tgisinternal
		) objects
		WHERE descr IS NULL AND tbl NOT LIKE 'river\_%' AND tbl NOT LIKE 'schema\_migrations%'
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		missing = append(missing, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Fatalf("schema objects without a COMMENT ON saying what they guarantee:\n  %s", strings.Join(missing, "\n  "))
	}
}

// The append-only triggers name ledger_append_only in their error, so MapError recognises any change
// or removal of an entry by constraint and table.
func TestLedgerChangesAreErrAppendOnly(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	createAccount(t, pool, "acct_1")
	if _, err := post(t, pool, db.Posting{AccountID: "acct_1", Kind: db.KindGrant, Amount: 100, DedupeKey: "k1"}); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{`UPDATE ledger SET amount = 1`, `DELETE FROM ledger`, `TRUNCATE ledger`} {
		_, err := pool.Exec(context.Background(), stmt)
		if err = db.MapError(err); !errors.Is(err, db.ErrAppendOnly) {
			t.Errorf("%s: %v, want ErrAppendOnly", stmt, err)
		}
	}
	if b := balance(t, pool, "acct_1"); b != 100 {
		t.Fatalf("balance %d, want 100", b)
	}
	if n := count(t, pool, `SELECT count(*) FROM ledger WHERE amount = 100`); n != 1 {
		t.Fatalf("%d entries of 100, want the one posted", n)
	}
}

// Package db is the one door to the database: no other package imports the driver's core (pgx,
// pgconn) outside its tests, except those that cannot do without it: River's notifier takes a
// pgx.Tx, pglocal and dbtest create and drop databases, and the binaries' database tooling does too.
// (The generated code, in db/internal, is held by the compiler.)
func TestOnlyDBImportsTheDriver(t *testing.T) {
	allowed := []string{"db", "db/dbtest", "internal/notify", "internal/pglocal", "cmd/onceledger", "cmd/onceledger-bench"}
	forbidden := []string{"github.com/jackc/pgx/v5", "github.com/jackc/pgx/v5/pgconn"}
	fset := token.NewFileSet()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		pkg := filepath.ToSlash(filepath.Dir(strings.TrimPrefix(path, ".."+string(filepath.Separator))))
		if slices.Contains(allowed, pkg) || strings.HasPrefix(pkg, "db/internal/") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); slices.Contains(forbidden, p) {
				t.Errorf("%s imports %s: go through package db (db.Tx, db.Conn, db functions)", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
