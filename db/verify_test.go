package db_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

// tamper runs stmts in one transaction, as a bug or a hand-written fix would write them. The
// tables they write have no trigger that would stop them (the ledger's are the append-only rule, the
// chain and the lots, none of which a tamper below meets but the dedupe one, which inserts a sound
// entry).
func tamper(t *testing.T, pool *pgxpool.Pool, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	err := db.InTx(ctx, pool, func(tx db.Tx) error {
		for _, stmt := range stmts {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("tamper: %v", err)
	}
}

// Each of verify's checks fires on the one invariant it guards: a sound ledger is built, verify finds
// nothing, the invariant is broken behind the guarantees' back (or, where the ledger itself lets it
// happen, through it), and verify reports exactly that one violation. The balance, chain and parked
// checks have tests of their own (ledger_test.go, cmd/onceledger review_test.go).
func TestVerifyFindsEachViolation(t *testing.T) {
	t.Parallel()
	const grace = time.Hour
	for _, c := range []struct {
		check string
		// breakIt builds on acct_v, created with a signup grant of 1000 (its one lot), then breaks one
		// invariant.
		breakIt func(t *testing.T, ctx context.Context, pool *pgxpool.Pool)
	}{
		{"reversals", func(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
			// Stripe never refunds more than was paid; the ledger posts what Stripe says.
			for _, p := range []db.Posting{
				{AccountID: "acct_v", Kind: db.KindTopup, Amount: 500, DedupeKey: "stripe:evt_paid", PaymentIntent: "pi_v"},
				{AccountID: "acct_v", Kind: db.KindRefund, Amount: -400, DedupeKey: "stripe:refund:re_1", PaymentIntent: "pi_v"},
				{AccountID: "acct_v", Kind: db.KindDispute, Amount: -200, DedupeKey: "stripe:dispute:du_1", PaymentIntent: "pi_v"},
			} {
				if _, err := post(t, pool, p); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"dedupe", func(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
			createAccount(t, pool, "acct_other")
			if _, err := post(t, pool, db.Posting{AccountID: "acct_v", Kind: db.KindAdjustment, Amount: 100, DedupeKey: "api:k"}); err != nil {
				t.Fatal(err)
			}
			// Without ledger_dedupe_idx, a second entry under the key continues acct_other's chain (on Citus
			// the index is per account, and a raw insert claims nothing in dedupe_claims).
			tamper(t, pool, `DROP INDEX IF EXISTS ledger_dedupe_idx`,
				`INSERT INTO ledger (account_id, kind, amount, dedupe_key, seq, balance_after)
				 VALUES ('acct_other', 'adjustment', 100, 'api:k', 1, 100)`)
		}},
		{"held", func(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
			tamper(t, pool, `UPDATE accounts SET held = 10 WHERE id = 'acct_v'`)
		}},
		{"capture", func(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
			if _, err := db.AuthoriseHold(ctx, pool, "acct_v", db.HoldRequest{ID: "h_cap", Amount: 100, ExpiresIn: time.Hour}); err != nil {
				t.Fatal(err)
			}
			if _, err := dbtest.Ledger(t, pool).CaptureHold(ctx, "acct_v", "h_cap", 60); err != nil {
				t.Fatal(err)
			}
			tamper(t, pool, `UPDATE holds SET captured_amount = 70 WHERE account_id = 'acct_v' AND id = 'h_cap'`)
		}},
		{"expiry", func(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
			if _, err := db.AuthoriseHold(ctx, pool, "acct_v", db.HoldRequest{ID: "h_old", Amount: 100, ExpiresIn: time.Hour}); err != nil {
				t.Fatal(err)
			}
			// Backdated past its expiry by more than the grace: the expiry pass has not run.
			tamper(t, pool, `UPDATE holds SET created_at = now() - interval '3 hours', expires_at = now() - interval '2 hours'
				WHERE account_id = 'acct_v' AND id = 'h_old'`)
		}},
		{"lot", func(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
			tamper(t, pool, `UPDATE credit_lots SET amount = amount + 1 WHERE account_id = 'acct_v'`)
		}},
		{"lots", func(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
			// A lot no credit made: the open lots hold more than the balance.
			tamper(t, pool, `INSERT INTO credit_lots (account_id, entry_id, category, amount, remaining)
				VALUES ('acct_v', 0, 'promotional', 5, 5)`)
		}},
		{"lot_expiry", func(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
			tamper(t, pool, `UPDATE credit_lots SET created_at = now() - interval '3 hours', expires_at = now() - interval '2 hours'
				WHERE account_id = 'acct_v'`)
		}},
		{"unbillable", func(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
			// Three decisions of 2^62: their sum leaves a bigint, so billing leaves them out.
			var huge []db.Decision
			for g := 1; g <= 3; g++ {
				huge = append(huge, db.Decision{ID: fmt.Sprintf("dec_huge_%d", g), AccountID: "acct_v", Cost: 1 << 62, OccurredAt: time.Now()})
			}
			if _, err := db.StoreDecisions(ctx, pool, huge); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.check, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := dbtest.New(t)
			if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_v", "usd", 1000); err != nil {
				t.Fatal(err)
			}
			if violations, err := db.Verify(ctx, pool, timeNow(), parkedAfter, grace); err != nil || len(violations) != 0 {
				t.Fatalf("sound ledger: %v, %v; want no violations", violations, err)
			}
			c.breakIt(t, ctx, pool)
			violations, err := db.Verify(ctx, pool, timeNow(), parkedAfter, grace)
			if err != nil {
				t.Fatal(err)
			}
			if len(violations) != 1 || violations[0].Check != c.check {
				t.Fatalf("violations %v, want one %s violation", violations, c.check)
			}
			t.Log(violations[0])
		})
	}
}
