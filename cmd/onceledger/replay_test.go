package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/stripeevents"
)

// A top-up parked because its account did not exist is applied by `replay` once the account exists,
// and replaying it again credits nothing.
func TestReplayAppliesParkedEventOnce(t *testing.T) {
	t.Parallel()
	url := dbtest.URL(t)
	ctx := context.Background()
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	processor := &stripeevents.Processor{Pool: pool, Ledger: dbtest.Ledger(t, pool), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	event := `{"id":"evt_replay","object":"event","type":"checkout.session.completed","api_version":"2025-04-30.basil",
		"created":1700000000,"livemode":false,"data":{"object":{"id":"cs_replay","object":"checkout.session",
		"payment_status":"paid","amount_total":700,"currency":"eur","metadata":{"account_id":"acct_late"},
		"payment_intent":"pi_replay"}}}`
	res, err := processor.Process(ctx, []byte(event))
	if err != nil || res.Parked != stripeevents.ReasonUnknownAccount {
		t.Fatalf("first delivery: %+v, %v; want parked unknown_account", res, err)
	}
	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_late", "eur", 0); err != nil {
		t.Fatal(err)
	}
	vars := getenvFrom(map[string]string{"DATABASE_URL": url})

	// A dry run prints the credit a replay would post, and posts nothing.
	stdout := &output{}
	if err := run(ctx, []string{"replay", "--dry-run", "evt_replay"}, vars, stdout, &output{}); err != nil {
		t.Fatalf("replay --dry-run: %v\n%s", err, stdout)
	}
	if want := "evt_replay dry-run applied credited=true reversed=0 restored=0\n" +
		"  + acct_late topup +700 stripe:evt_replay balance_after=700\n"; stdout.String() != want {
		t.Fatalf("replay --dry-run printed\n%s\nwant\n%s", stdout, want)
	}
	if acct, err := db.GetAccount(ctx, pool, "acct_late"); err != nil || acct.Balance != 0 {
		t.Fatalf("after a dry run: %+v, %v; want balance 0", acct, err)
	}
	if outcome := eventOutcome(t, pool, "evt_replay"); outcome != "parked" {
		t.Fatalf("after a dry run the event is %s, want still parked", outcome)
	}

	for _, want := range []string{"evt_replay applied credited=true", "evt_replay applied credited=false"} {
		stdout := &output{}
		if err := run(ctx, []string{"replay", "evt_replay"}, vars, stdout, &output{}); err != nil {
			t.Fatalf("replay: %v\n%s", err, stdout)
		}
		if !strings.HasPrefix(stdout.String(), want) {
			t.Fatalf("replay printed %q, want %q", stdout, want)
		}
	}
	acct, err := db.GetAccount(ctx, pool, "acct_late")
	if err != nil {
		t.Fatal(err)
	}
	if acct.Balance != 700 {
		t.Fatalf("balance %d after two replays, want 700", acct.Balance)
	}

	// Once applied, a dry run finds nothing left to post.
	stdout = &output{}
	if err := run(ctx, []string{"replay", "--dry-run", "evt_replay"}, vars, stdout, &output{}); err != nil {
		t.Fatalf("replay --dry-run: %v\n%s", err, stdout)
	}
	if want := "evt_replay dry-run applied credited=false reversed=0 restored=0\n  would post nothing\n"; stdout.String() != want {
		t.Fatalf("replay --dry-run after the replay printed\n%s\nwant\n%s", stdout, want)
	}

	stdout = &output{}
	if err := run(ctx, []string{"replay", "evt_never_received"}, vars, stdout, &output{}); err == nil || exitCode(err) != 1 {
		t.Fatalf("replay of an unknown event: %v, want a failure\n%s", err, stdout)
	}
	for _, args := range [][]string{{"replay"}, {"replay", "--dry-run"}} {
		if err := run(ctx, args, vars, &output{}, &output{}); exitCode(err) != 2 {
			t.Fatalf("%v: %v, want a usage error", args, err)
		}
	}
}

func eventOutcome(t *testing.T, pool *pgxpool.Pool, eventID string) string {
	t.Helper()
	ev, err := db.GetEvent(context.Background(), pool, eventID)
	if err != nil {
		t.Fatal(err)
	}
	return ev.Outcome
}
