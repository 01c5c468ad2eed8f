package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

// databaseWithAccount returns a fresh database holding one account, and a pool for the test's own
// reads and writes beside the command under test.
func databaseWithAccount(t *testing.T, accountID string) (string, *pgxpool.Pool) {
	t.Helper()
	url := dbtest.URL(t)
	pool, err := db.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := ledger.CreateAccount(context.Background(), pool, accountID, "usd", 0); err != nil {
		t.Fatal(err)
	}
	return url, pool
}

func TestReconcileOnceBillsAndReports(t *testing.T) {
	t.Parallel()
	url, pool := databaseWithAccount(t, "acct_cli")
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO decisions (id, account_id, cost)
		VALUES ('dec_a', 'acct_cli', 2), ('dec_b', 'acct_cli', 3), ('dec_c', 'acct_nobody', 4)`); err != nil {
		t.Fatal(err)
	}
	vars := getenvFrom(map[string]string{"DATABASE_URL": url})

	stdout := &output{}
	if err := run(ctx, []string{"reconcile", "--once", "--progress-every", "1"}, vars, stdout, &output{}); err != nil {
		t.Fatalf("reconcile --once: %v\n%s", err, stdout)
	}
	for _, want := range []string{"billed 2 decisions (-5 minor units)", "read 3", "… read 3 decisions",
		"waiting: 1 decisions", "acct_nobody", "not checked (STRIPE_SECRET_KEY not set)"} {
		if !strings.Contains(stdout.String(), want) {
			t.Fatalf("reconcile --once printed:\n%s\nwant %q in it", stdout, want)
		}
	}
	acct, err := db.GetAccount(ctx, pool, "acct_cli")
	if err != nil || acct.Balance != -5 {
		t.Fatalf("acct_cli after reconcile: %+v %v; want balance -5", acct, err)
	}

	stdout = &output{}
	if err := run(ctx, []string{"reconcile", "--once"}, vars, stdout, &output{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "billed 0 decisions") {
		t.Fatalf("second reconcile --once printed:\n%s\nwant nothing billed", stdout)
	}
}

func TestServeBillsDecisionsInTheBackground(t *testing.T) {
	t.Parallel()
	url, pool := databaseWithAccount(t, "acct_bg")
	ctx := context.Background()
	startServe(t, map[string]string{"DATABASE_URL": url, "RECONCILE_INTERVAL": "50ms"})
	if _, err := pool.Exec(ctx, `INSERT INTO decisions (id, account_id, cost) VALUES ('dec_bg', 'acct_bg', 7)`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		acct, err := db.GetAccount(ctx, pool, "acct_bg")
		if err != nil {
			t.Fatal(err)
		}
		if acct.Balance == -7 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("balance still %d after 10s of serve; want -7", acct.Balance)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
