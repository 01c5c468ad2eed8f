package db

import (
	"testing"

	"github.com/onceledger/onceledger/sql/citus"
)

// The distribute step runs sql/citus/prepare.sql one statement at a time: the split keeps each function
// body, quoted string and comment whole.
func TestPrepareSplitsIntoItsStatements(t *testing.T) {
	got := statements("SELECT 1; -- a comment; with a semicolon\nCREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; SELECT 2; $$;\n" +
		"COMMENT ON FUNCTION f() IS 'one; two';\nDO $x$ BEGIN PERFORM 1; END; $x$;\n-- the end\n")
	want := []string{
		"SELECT 1;",
		"-- a comment; with a semicolon\nCREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; SELECT 2; $$;",
		"COMMENT ON FUNCTION f() IS 'one; two';",
		"DO $x$ BEGIN PERFORM 1; END; $x$;",
	}
	if len(got) != len(want) {
		t.Fatalf("%d statements, want %d: %q", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("statement %d = %q, want %q", i, got[i], want[i])
		}
	}
	if n := len(statements(citus.Prepare)); n < 40 {
		t.Fatalf("prepare.sql splits into %d statements", n)
	}
}
