package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/reconcile"
)

// A pass bills first, then expires every lot whose time is up (GRANT_TTL here), set-based over more
// accounts than one expiry transaction takes: the billed usage drew the grant before it expired, and
// the expiry took exactly what was left.
func TestPassExpiresLotsAfterBilling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	const accounts = 1001
	if _, err := pool.Exec(ctx, `INSERT INTO accounts (id, currency) SELECT 'acct_' || g, 'usd' FROM generate_series(1, $1::int) g`, accounts); err != nil {
		t.Fatal(err)
	}
	// Every account's signup grant in one statement, through the one road: ledger_lots makes each a
	// promotional lot expiring after GRANT_TTL (an hour), whose time the test then sets an hour back.
	if _, err := pool.Exec(ctx, `
		SELECT count(*)
		FROM (SELECT array_agg(id ORDER BY id) AS ids, array_agg('grant:' || id ORDER BY id) AS keys FROM accounts) a
		CROSS JOIN LATERAL ledger_append(
		    a.ids, array_fill('grant'::text, ARRAY[$1::int]), array_fill(500::bigint, ARRAY[$1::int]),
		    array_fill('signup grant'::text, ARRAY[$1::int]), a.keys, p_lot_ttls => array_fill(3600::float8, ARRAY[$1::int]))`,
		accounts); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE credit_lots SET expires_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	storeDecision(t, pool, "d1", "acct_1", 100, "")

	rep, err := reconcile.New(reconcile.Deps{Pool: pool, Ledger: dbtest.Ledger(t, pool)}, reconcile.Options{}).Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Bill.Billed != 1 || rep.LotsExpired != accounts {
		t.Fatalf("pass billed %d and expired %d lots; want 1 and %d", rep.Bill.Billed, rep.LotsExpired, accounts)
	}
	var expired, open int
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT -sum(amount) FROM ledger WHERE kind = 'expiry'),
		(SELECT count(*) FROM credit_lots WHERE closed_at IS NULL)`).Scan(&expired, &open); err != nil {
		t.Fatal(err)
	}
	if expired != 500*accounts-100 || open != 0 {
		t.Fatalf("expired %d with %d lots open; want %d and 0", expired, open, 500*accounts-100)
	}
	wantAccount(t, pool, "acct_1", 0, 0)
	wantAccount(t, pool, "acct_2", 0, 0)
	violations, err := db.Verify(ctx, pool, time.Now(), time.Hour, time.Hour)
	if err != nil || len(violations) > 0 {
		t.Fatalf("verify: %v %v", violations, err)
	}
	again, err := reconcile.New(reconcile.Deps{Pool: pool, Ledger: dbtest.Ledger(t, pool)}, reconcile.Options{}).Pass(ctx)
	if err != nil || again.LotsExpired != 0 {
		t.Fatalf("second pass expired %d (%v), want 0", again.LotsExpired, err)
	}
}
