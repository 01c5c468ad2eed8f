package citus

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/onceledger/onceledger/sql/migrations"
)

// mirrorsLine is how prepare.sql names the plain function a Citus form follows: the function, the
// migration whose definition of it is the latest, and a SHA-256 of that definition.
var mirrorsLine = regexp.MustCompile(`(?m)^-- mirrors (\w+)(?: of (\S+) sha256 ([0-9a-f]{64}))?$`)

// TestCitusFormsFollowTheirMigrations: every function prepare.sql gives a Citus form of follows the
// latest definition of its plain form in the migrations. When a migration redefines one, this fails
// until its Citus form is reviewed (and changed, if the rule changed) and its mirrors line updated: a
// Citus form can never silently undo, or miss, what a later migration did.
func TestCitusFormsFollowTheirMigrations(t *testing.T) {
	lines := mirrorsLine.FindAllStringSubmatch(Prepare, -1)
	if len(lines) == 0 {
		t.Fatal("prepare.sql mirrors no function")
	}
	for _, m := range lines {
		name, file, hash := m[1], m[2], m[3]
		latestFile, body := latestDefinition(t, name)
		if latestFile == "" {
			t.Errorf("prepare.sql mirrors %s, which no migration defines", name)
			continue
		}
		sum := sha256.Sum256([]byte(body))
		want := "-- mirrors " + name + " of " + latestFile + " sha256 " + hex.EncodeToString(sum[:])
		if file != latestFile || hash != hex.EncodeToString(sum[:]) {
			t.Errorf("%s was defined again by %s: review its Citus form in prepare.sql, then make its line\n%s", name, latestFile, want)
		}
	}
}

// latestDefinition returns the last migration (in order) that creates function name, and the text of
// that definition, from CREATE to the end of its body.
func latestDefinition(t *testing.T, name string) (file, body string) {
	t.Helper()
	files, err := fs.Glob(migrations.FS, "*.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	create := regexp.MustCompile(`(?i)CREATE (?:OR REPLACE )?FUNCTION ` + regexp.QuoteMeta(name) + `\(`)
	for _, f := range files {
		text, err := fs.ReadFile(migrations.FS, f)
		if err != nil {
			t.Fatal(err)
		}
		s := string(text)
		for _, loc := range create.FindAllStringIndex(s, -1) {
			file, body = f, definition(t, s[loc[0]:])
		}
	}
	return file, body
}

// definition cuts a function's definition at the end of its dollar-quoted body.
func definition(t *testing.T, s string) string {
	t.Helper()
	open := regexp.MustCompile(`\$\w*\$`).FindStringIndex(s)
	if open == nil {
		t.Fatalf("no body in %.80q", s)
	}
	tag := s[open[0]:open[1]]
	end := strings.Index(s[open[1]:], tag)
	if end < 0 {
		t.Fatalf("no end of body %s in %.80q", tag, s)
	}
	return s[:open[1]+end+len(tag)]
}
