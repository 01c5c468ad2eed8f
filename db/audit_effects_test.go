package db_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

// doomedKey names the requests whose records refuseRecordsOf makes fail.
const doomedKey = "doomed"

// refuseRecordsOf makes the append of a record of key fail: the last statement of its effect's
// transaction, after every statement of the effect itself.
func refuseRecordsOf(t *testing.T, pool *pgxpool.Pool, key string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), fmt.Sprintf(
		`ALTER TABLE audit_log ADD CONSTRAINT audit_log_test_refused CHECK (key_name <> '%s')`, key)); err != nil {
		t.Fatal(err)
	}
}

// requestBy is the context of a request of key naming account, with its record pending.
func requestBy(key, account string) (context.Context, *db.PendingAudit) {
	return db.WithPendingAudit(context.Background(), db.AuditRecord{
		KeyName: key, Action: "POST /test", AccountID: account, Status: 200, RemoteAddr: "127.0.0.1"})
}

// auditedEffect is one kind of request that commits an effect: prepare sets its account up (with no
// record), do runs the operation the API or the console runs for it, and effect counts what it
// committed (0 before, 1 after).
type auditedEffect struct {
	name    string
	prepare func(t *testing.T, pool *pgxpool.Pool, ledger *db.Ledger, account string)
	do      func(ctx context.Context, pool *pgxpool.Pool, ledger *db.Ledger, account string) error
	effect  string // $1 is the account
}

func withAccount(balance int64) func(*testing.T, *pgxpool.Pool, *db.Ledger, string) {
	return func(t *testing.T, _ *pgxpool.Pool, ledger *db.Ledger, account string) {
		t.Helper()
		if _, err := ledger.CreateAccount(context.Background(), account, "usd", balance); err != nil {
			t.Fatal(err)
		}
	}
}

func withHold(t *testing.T, pool *pgxpool.Pool, ledger *db.Ledger, account string) {
	t.Helper()
	withAccount(100)(t, pool, ledger, account)
	if _, err := db.AuthoriseHold(context.Background(), pool, account, db.HoldRequest{ID: "h", Amount: 10, ExpiresIn: time.Hour}); err != nil {
		t.Fatal(err)
	}
}

// sessionID is a console session's id (a SHA-256) for account's case.
func sessionID(account string) []byte {
	id := sha256.Sum256([]byte(account))
	return id[:]
}

var dailyLimit = db.LimitDefinition{Scope: db.ScopeAccount, Period: "day", Amount: 1000, Mode: db.LimitHard}

// Every kind of request that commits an effect writes its record in the effect's transaction: when
// that transaction fails after the record's append, neither the effect nor the record is there; when
// it commits, both are, the record once, with outcome ok, and the request knows not to record again.
func TestAuditRecordCommitsWithItsEffect(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ledger := dbtest.Ledger(t, pool)
	refuseRecordsOf(t, pool, doomedKey)
	threshold, amount, low := int64(10), int64(100), int64(50)

	kinds := []auditedEffect{
		{"posting", withAccount(0), func(ctx context.Context, _ *pgxpool.Pool, l *db.Ledger, a string) error {
			_, err := l.PostGrouped(ctx, db.Posting{AccountID: a, Kind: db.KindAdjustment, Amount: 5, DedupeKey: "api:" + a + ":k", NoOverdraw: true})
			return err
		}, `SELECT count(*) FROM ledger WHERE account_id = $1 AND kind = 'adjustment'`},
		{"hold authorisation", withAccount(100), func(ctx context.Context, _ *pgxpool.Pool, l *db.Ledger, a string) error {
			_, err := l.AuthoriseHoldGrouped(ctx, a, db.HoldRequest{ID: "h", Amount: 10, ExpiresIn: time.Hour})
			return err
		}, `SELECT count(*) FROM holds WHERE account_id = $1`},
		{"hold capture", withHold, func(ctx context.Context, _ *pgxpool.Pool, l *db.Ledger, a string) error {
			_, err := l.CaptureHold(ctx, a, "h", 0)
			return err
		}, `SELECT count(*) FROM holds WHERE account_id = $1 AND status = 'captured'`},
		{"hold void", withHold, func(ctx context.Context, pool *pgxpool.Pool, _ *db.Ledger, a string) error {
			_, err := db.VoidHold(ctx, pool, a, "h")
			return err
		}, `SELECT count(*) FROM holds WHERE account_id = $1 AND status = 'voided'`},
		{"account creation", func(*testing.T, *pgxpool.Pool, *db.Ledger, string) {}, func(ctx context.Context, _ *pgxpool.Pool, l *db.Ledger, a string) error {
			_, err := l.CreateAccount(ctx, a, "usd", 10)
			return err
		}, `SELECT count(*) FROM accounts WHERE id = $1`},
		{"lot void", withAccount(100), func(ctx context.Context, pool *pgxpool.Pool, l *db.Ledger, a string) error {
			var lot int64
			if err := pool.QueryRow(ctx, `SELECT id FROM credit_lots WHERE account_id = $1`, a).Scan(&lot); err != nil {
				return err
			}
			_, err := l.VoidLot(ctx, lot)
			return err
		}, `SELECT count(*) FROM credit_lots WHERE account_id = $1 AND closed_at IS NOT NULL`},
		{"recharge settings", withAccount(0), func(ctx context.Context, pool *pgxpool.Pool, _ *db.Ledger, a string) error {
			_, err := db.SetRecharge(ctx, pool, a, db.RechargeSettings{Threshold: &threshold, Amount: &amount})
			return err
		}, `SELECT count(*) FROM accounts WHERE id = $1 AND recharge_threshold IS NOT NULL`},
		{"alert settings", withAccount(0), func(ctx context.Context, pool *pgxpool.Pool, _ *db.Ledger, a string) error {
			_, err := db.SetLowBalanceAlert(ctx, pool, a, &low)
			return err
		}, `SELECT count(*) FROM accounts WHERE id = $1 AND low_balance_alert IS NOT NULL`},
		{"limit put", withAccount(0), func(ctx context.Context, pool *pgxpool.Pool, _ *db.Ledger, a string) error {
			return db.PutLimit(ctx, pool, a, "daily", dailyLimit)
		}, `SELECT count(*) FROM spend_limits WHERE account_id = $1`},
		{"limit delete", func(t *testing.T, pool *pgxpool.Pool, l *db.Ledger, a string) {
			withAccount(0)(t, pool, l, a)
			if err := db.PutLimit(context.Background(), pool, a, "daily", dailyLimit); err != nil {
				t.Fatal(err)
			}
		}, func(ctx context.Context, pool *pgxpool.Pool, _ *db.Ledger, a string) error {
			return db.DeleteLimit(ctx, pool, a, "daily")
		}, `SELECT 1 - count(*) FROM spend_limits WHERE account_id = $1`},
		{"decisions intake", withAccount(100), func(ctx context.Context, pool *pgxpool.Pool, _ *db.Ledger, a string) error {
			_, err := db.StoreDecisions(ctx, pool, []db.Decision{{ID: a + "-d", AccountID: a, Cost: 5, OccurredAt: time.Now()}})
			return err
		}, `SELECT count(*) FROM decisions WHERE account_id = $1`},
		{"top-up", func(t *testing.T, pool *pgxpool.Pool, l *db.Ledger, a string) {
			withAccount(0)(t, pool, l, a)
			if _, _, err := db.InsertPendingTopup(context.Background(), pool, db.Topup{ID: "top_" + a, AccountID: a, Amount: 900, Currency: "usd"}); err != nil {
				t.Fatal(err)
			}
		}, func(ctx context.Context, pool *pgxpool.Pool, _ *db.Ledger, a string) error {
			_, err := db.SetTopupSession(ctx, pool, "top_"+a, "cs_"+a, "https://checkout.example/cs_"+a)
			return err
		}, `SELECT count(*) FROM topups WHERE account_id = $1 AND session_id IS NOT NULL`},
		{"console login", func(*testing.T, *pgxpool.Pool, *db.Ledger, string) {}, func(ctx context.Context, pool *pgxpool.Pool, _ *db.Ledger, a string) error {
			return db.StartConsoleSession(ctx, pool, sessionID(a), a, time.Hour)
		}, `SELECT count(*) FROM console_sessions WHERE key_name = $1`},
		{"console logout", func(t *testing.T, pool *pgxpool.Pool, _ *db.Ledger, a string) {
			if err := db.StartConsoleSession(context.Background(), pool, sessionID(a), a, time.Hour); err != nil {
				t.Fatal(err)
			}
		}, func(ctx context.Context, pool *pgxpool.Pool, _ *db.Ledger, a string) error {
			return db.RevokeConsoleSession(ctx, pool, sessionID(a))
		}, `SELECT count(*) FROM console_sessions WHERE key_name = $1 AND revoked_at IS NOT NULL`},
		{"event review", func(t *testing.T, pool *pgxpool.Pool, _ *db.Ledger, a string) {
			if _, err := db.RecordEvent(context.Background(), pool, db.Event{ID: "evt_" + a, Type: "charge.refunded", APIVersion: "2024-06-20",
				Created: time.Now(), Payload: []byte(`{}`), Outcome: "parked", ParkedReason: "unknown_payment", PaymentIntent: "pi_" + a}); err != nil {
				t.Fatal(err)
			}
		}, func(ctx context.Context, pool *pgxpool.Pool, _ *db.Ledger, a string) error {
			// As the console's review does.
			return db.InAuditedTx(ctx, pool, func(tx db.Tx) (bool, error) {
				return db.MarkReviewed(ctx, tx, "evt_"+a, "ops")
			})
		}, `SELECT count(*) FROM stripe_events WHERE event_id = 'evt_' || $1 AND reviewed_at IS NOT NULL`},
	}
	for i, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			account := "acct_" + strconv.Itoa(i)
			k.prepare(t, pool, ledger, account)
			records := func(key string) int {
				return count(t, pool, `SELECT count(*) FROM audit_log WHERE account_id = $1 AND key_name = $2`, account, key)
			}

			ctx, pending := requestBy(doomedKey, account)
			if err := k.do(ctx, pool, ledger, account); err == nil {
				t.Fatal("the effect committed, yet its record was refused")
			}
			if n := count(t, pool, k.effect, account); n != 0 || records(doomedKey) != 0 || pending.Written() {
				t.Fatalf("after a failed record: effect %d, records %d, written %v; want neither", n, records(doomedKey), pending.Written())
			}

			ctx, pending = requestBy("ops", account)
			if err := k.do(ctx, pool, ledger, account); err != nil {
				t.Fatal(err)
			}
			if n := count(t, pool, k.effect, account); n != 1 || !pending.Written() || pending.Replayed() {
				t.Fatalf("effect %d, written %v, replayed %v; want 1, true, false", n, pending.Written(), pending.Replayed())
			}
			if n := count(t, pool, `SELECT count(*) FROM audit_log WHERE account_id = $1 AND key_name = 'ops' AND outcome = 'ok' AND status = 200`, account); n != 1 {
				t.Fatalf("%d records of the committed effect, want 1", n)
			}
		})
	}
}

// A request answered from what was stored writes nothing, its record either: it is left to the
// guard, which records it as a replay.
func TestAuditReplayWritesNoRecord(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ledger := dbtest.Ledger(t, pool)
	if _, err := ledger.CreateAccount(context.Background(), "acct_replay", "usd", 100); err != nil {
		t.Fatal(err)
	}
	p := db.Posting{AccountID: "acct_replay", Kind: db.KindAdjustment, Amount: 5, DedupeKey: "api:acct_replay:k", NoOverdraw: true}
	for i, want := range []bool{true, false} {
		ctx, pending := requestBy("ops", "acct_replay")
		posted, err := ledger.PostGrouped(ctx, p)
		if err != nil || posted.New != want || pending.Written() != want || pending.Replayed() == want {
			t.Fatalf("posting %d: new %v (%v), written %v, replayed %v; want new and written %v", i, posted.New, err, pending.Written(), pending.Replayed(), want)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM audit_log WHERE account_id = 'acct_replay'`); n != 1 {
		t.Fatalf("%d records, want 1: the first posting's", n)
	}
}

// Concurrent requests of one account commit in groups, their records with them, in one statement: a
// member whose record fails takes the group down, and then posts nothing and fails alone while every
// other member's effect commits with its record.
func TestAuditRecordsOfAGroupCommitWithIt(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	refuseRecordsOf(t, pool, doomedKey)
	ledger := dbtest.Ledger(t, pool, db.LedgerConfig{Groups: db.GroupOptions{Window: 200 * time.Millisecond}})
	if _, err := ledger.CreateAccount(context.Background(), "acct_group", "usd", 1000); err != nil {
		t.Fatal(err)
	}
	const members = 6
	records := `SELECT count(*) FROM audit_log WHERE key_name = 'ops' AND outcome = 'ok'`
	// run runs members concurrent requests, the doomed one's record refused (none when -1), and checks
	// that the others, and only they, committed their effects (counted by effect) and their records.
	run := func(what string, doomed int, effect string, do func(ctx context.Context, i int) error) {
		t.Helper()
		effectsBefore, recordsBefore := count(t, pool, effect), count(t, pool, records)
		errs, pending := make([]error, members), make([]*db.PendingAudit, members)
		var wg sync.WaitGroup
		for i := range members {
			key := "ops"
			if i == doomed {
				key = doomedKey
			}
			var ctx context.Context
			ctx, pending[i] = requestBy(key, "acct_group")
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = do(ctx, i)
			}()
		}
		wg.Wait()
		want := members
		for i, err := range errs {
			if i == doomed {
				want--
			}
			if (err == nil) != (i != doomed) || pending[i].Written() != (i != doomed) {
				t.Errorf("%s %d: %v, written %v", what, i, err, pending[i].Written())
			}
		}
		if n := count(t, pool, effect) - effectsBefore; n != want {
			t.Errorf("%d %s committed, want %d", n, what, want)
		}
		if n := count(t, pool, records) - recordsBefore; n != want {
			t.Errorf("%d records of %s, want %d", n, what, want)
		}
	}

	for round, doomed := range []int{-1, 2} {
		run("postings", doomed, `SELECT count(*) FROM ledger WHERE account_id = 'acct_group' AND kind = 'adjustment'`,
			func(ctx context.Context, i int) error {
				_, err := ledger.PostGrouped(ctx, db.Posting{AccountID: "acct_group", Kind: db.KindAdjustment, Amount: -1,
					DedupeKey: fmt.Sprintf("api:acct_group:%d-%d", round, i), NoOverdraw: true})
				return err
			})
		run("holds", doomed, `SELECT count(*) FROM holds WHERE account_id = 'acct_group'`,
			func(ctx context.Context, i int) error {
				_, err := ledger.AuthoriseHoldGrouped(ctx, "acct_group", db.HoldRequest{ID: fmt.Sprintf("h%d-%d", round, i), Amount: 1, ExpiresIn: time.Hour})
				return err
			})
	}
}
