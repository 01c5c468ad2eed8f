package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/stripeevents"
)

// A parked event fails verify once older than --parked-after, until an operator reviews it; then verify
// names the reviewer, and the audit trail has the review. review refuses ids that are not parked events,
// and changes no money.
func TestReviewSilencesAParkedEventInVerify(t *testing.T) {
	t.Parallel()
	url := dbtest.URL(t)
	ctx := context.Background()
	pool := openPool(t, url)
	processor := &stripeevents.Processor{Pool: pool, Ledger: dbtest.Ledger(t, pool), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, event := range [][]byte{
		stripeEvent("evt_parked", "refund.created", map[string]any{"id": "re_1", "object": "refund", "amount": 300,
			"currency": "gbp", "status": "succeeded", "payment_intent": "pi_never_paid"}),
		stripeEvent("evt_ignored", "customer.created", map[string]any{"id": "cus_1", "object": "customer"}),
	} {
		if _, err := processor.Process(ctx, event); err != nil {
			t.Fatal(err)
		}
	}
	vars := getenvFrom(map[string]string{"DATABASE_URL": url})
	verify := func() (string, error) {
		stdout := &output{}
		err := run(ctx, []string{"verify", "--parked-after", "0s"}, vars, stdout, &output{})
		return stdout.String(), err
	}

	if out, err := verify(); exitCode(err) != 1 || !strings.Contains(out, "evt_parked") {
		t.Fatalf("verify with an unreviewed parked event: %v\n%s", err, out)
	}
	stdout := &output{}
	if err := run(ctx, []string{"review", "--by", "alice", "evt_parked"}, vars, stdout, &output{}); err != nil || stdout.String() != "evt_parked reviewed\n" {
		t.Fatalf("review: %v\n%s", err, stdout)
	}
	if out, err := verify(); err != nil || !strings.Contains(out, "evt_parked") || !strings.Contains(out, "reviewed by alice") {
		t.Fatalf("verify after review: %v, want it to name the reviewer\n%s", err, out)
	}
	var audited int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE key_name = 'alice' AND action = 'cli review' AND target_id = 'evt_parked'`).Scan(&audited); err != nil || audited != 1 {
		t.Fatalf("%d audit records of the review (%v), want 1", audited, err)
	}
	var outcome string
	if err := pool.QueryRow(ctx, `SELECT outcome FROM stripe_events WHERE event_id = 'evt_parked'`).Scan(&outcome); err != nil || outcome != "parked" {
		t.Fatalf("reviewed event is %q (%v), want still parked", outcome, err)
	}

	for _, id := range []string{"evt_ignored", "evt_never_received"} {
		stdout := &output{}
		if err := run(ctx, []string{"review", "--by", "alice", id}, vars, stdout, &output{}); exitCode(err) != 1 || !strings.Contains(stdout.String(), "not a parked event") {
			t.Fatalf("review %s: %v\n%s", id, err, stdout)
		}
	}
	for _, args := range [][]string{{"review"}, {"review", "evt_parked"}, {"review", "--by", "alice"}} {
		if err := run(ctx, args, vars, &output{}, &output{}); exitCode(err) != 2 {
			t.Fatalf("%v: %v, want a usage error", args, err)
		}
	}
}
