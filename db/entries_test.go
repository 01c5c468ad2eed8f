package db_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

// spentBy is an entry's subject and feature, as one string to compare.
func spentBy(e db.Entry) string { return e.Subject + "/" + e.Feature }

// The entry a hold's capture posts carries the hold's subject and feature, and so does a replayed
// capture's answer; the entry a decision's bill posts carries the decision's, whether it paid for a hold
// captured by the bill, paid beyond a hold captured through the API, or had no hold; an entry for
// nothing named carries none. Billing the chunk again posts nothing. Every read of the ledger (by key,
// the entries list, a statement) shows them.
func TestEntriesCarryTheSubjectAndFeatureOfTheirHoldOrDecision(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	l := dbtest.Ledger(t, pool)
	if _, err := l.CreateAccount(ctx, "acct_sf", "usd", 1000); err != nil {
		t.Fatal(err)
	}
	for _, h := range []db.HoldRequest{
		{ID: "h1", Amount: 100, ExpiresIn: time.Hour, Subject: "agent-7", Feature: "chat"},
		{ID: "h2", Amount: 50, ExpiresIn: time.Hour, Subject: "agent-8"},
	} {
		if _, err := db.AuthoriseHold(ctx, pool, "acct_sf", h); err != nil {
			t.Fatal(err)
		}
	}
	captured, err := l.CaptureHold(ctx, "acct_sf", "h1", 60)
	if err != nil || !captured.Posted || spentBy(captured.Entry) != "agent-7/chat" {
		t.Fatalf("capture: %+v, %v; want its entry spent by agent-7/chat", captured, err)
	}
	replayed, err := l.CaptureHold(ctx, "acct_sf", "h1", 60)
	if err != nil || replayed.Posted || replayed.Entry.ID != captured.Entry.ID || spentBy(replayed.Entry) != "agent-7/chat" {
		t.Fatalf("replayed capture: %+v, %v; want the original entry, spent by agent-7/chat", replayed, err)
	}

	now := time.Now()
	if _, err := db.StoreDecisions(ctx, pool, []db.Decision{
		{ID: "d1", AccountID: "acct_sf", Cost: 30, OccurredAt: now, Subject: "alice@example.com", Feature: "search"},
		{ID: "d2", AccountID: "acct_sf", Cost: 20, OccurredAt: now},
		{ID: "d3", AccountID: "acct_sf", Cost: 90, OccurredAt: now, HoldID: "h1", Subject: "agent-7", Feature: "chat"}, // 30 beyond the capture
		{ID: "d4", AccountID: "acct_sf", Cost: 10, OccurredAt: now, HoldID: "h2", Feature: "summarise"},                // captures h2
	}); err != nil {
		t.Fatal(err)
	}
	last, err := db.LastDecisionSeq(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"grant:acct_sf":   "/",
		"hold:acct_sf:h1": "agent-7/chat",
		"decision:d1":     "alice@example.com/search",
		"decision:d2":     "/",
		"decision:d3":     "agent-7/chat",
		"decision:d4":     "/summarise",
	}
	billed, err := l.BillChunk(ctx, 0, last, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(billed.Posted) != 4 {
		t.Fatalf("billing posted %d entries, want 4", len(billed.Posted))
	}
	for _, e := range billed.Posted {
		if spentBy(e) != want[e.DedupeKey] {
			t.Errorf("billing answered %s spent by %q, want %q", e.DedupeKey, spentBy(e), want[e.DedupeKey])
		}
	}
	if again, err := l.BillChunk(ctx, 0, last, 100); err != nil || len(again.Posted) != 0 {
		t.Fatalf("billing again posted %d entries (%v), want none", len(again.Posted), err)
	}

	for key, by := range want {
		e, err := db.EntryByDedupeKey(ctx, pool, key)
		if err != nil || spentBy(e) != by {
			t.Errorf("entry %s: spent by %q (%v), want %q", key, spentBy(e), err, by)
		}
	}
	listed, err := db.Entries(ctx, pool, "acct_sf", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	bounds, err := db.StatementBounds(ctx, pool, "acct_sf", now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var stated []db.Entry
	if err := db.StatementEntries(ctx, pool, bounds, func(e db.Entry) error { stated = append(stated, e); return nil }); err != nil {
		t.Fatal(err)
	}
	for name, entries := range map[string][]db.Entry{"entries list": listed, "statement": stated} {
		if len(entries) != len(want) {
			t.Errorf("%s: %d entries, want %d", name, len(entries), len(want))
		}
		for _, e := range entries {
			if spentBy(e) != want[e.DedupeKey] {
				t.Errorf("%s: %s spent by %q, want %q", name, e.DedupeKey, spentBy(e), want[e.DedupeKey])
			}
		}
	}
	verifyClean(t, pool)
}

var (
	// checkInMessage finds the constraint in the message of a check violation relayed without its name.
	checkInMessage = regexp.MustCompile(`violates check constraint "(\w+)"`)
	// citusShardSuffix is the shard id Citus appends to a constraint's name on a shard.
	citusShardSuffix = regexp.MustCompile(`_\d+$`)
)

// checkViolated returns the name of the CHECK constraint err violated ("" for none), as the server named
// it, or on Citus as the shard's message does (Citus relays a shard's violation as an internal error,
// without the constraint's name).
func checkViolated(err error) string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || (pgErr.Code != pgerrcode.CheckViolation && pgErr.Code != pgerrcode.InternalError) {
		return ""
	}
	name := pgErr.ConstraintName
	if name == "" {
		if m := checkInMessage.FindStringSubmatch(pgErr.Message); m != nil {
			name = m[1]
		}
	}
	return citusShardSuffix.ReplaceAllString(name, "")
}

// The database itself refuses an entry whose subject or feature is out of the format holds and decisions
// accept (an empty string included: none is NULL), whoever inserts it.
func TestLedgerRefusesASubjectOrFeatureOutOfFormat(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	createAccount(t, pool, "acct_raw")
	for _, c := range []struct {
		subject, feature any    // nil: NULL
		constraint       string // "" when accepted
	}{
		{"not a subject", nil, "ledger_subject_format_check"},
		{strings.Repeat("s", 129), nil, "ledger_subject_format_check"},
		{"", nil, "ledger_subject_format_check"},
		{nil, "a@b", "ledger_feature_format_check"},
		{nil, strings.Repeat("f", 65), "ledger_feature_format_check"},
		{nil, "", "ledger_feature_format_check"},
		{"alice@example.com", "chat", ""},
		{strings.Repeat("s", 128), strings.Repeat("f", 64), ""},
	} {
		_, err := pool.Exec(ctx, `INSERT INTO ledger (account_id, kind, amount, seq, balance_after, subject, feature)
			SELECT id, 'usage', -1, last_seq + 1, balance - 1, $1, $2 FROM accounts WHERE id = 'acct_raw'`, c.subject, c.feature)
		if got := checkViolated(err); got != c.constraint || (c.constraint == "" && err != nil) {
			t.Errorf("subject %v, feature %v: %v (check %q), want check %q", c.subject, c.feature, err, got, c.constraint)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM ledger WHERE account_id = 'acct_raw' AND subject IS NOT NULL`); n != 2 {
		t.Fatalf("%d entries with a subject, want the 2 accepted", n)
	}
}
