//go:build citus

package scaleout_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/reconcile"
	"github.com/onceledger/onceledger/internal/stripeevents"
)

// The migrations ran unchanged and the distribute step spread the tables as SPEC §15 lists: accounts by
// id, each table of an account's data by account_id colocated with it, stripe_events by event id, the
// global claims by key; the seed's global index gave way to the per-account one and the claims.
func TestCitusDistributesTheSchema(t *testing.T) {
	ctx := context.Background()
	rows, err := pool.Query(ctx, `
		SELECT logicalrelid::regclass::text, column_to_column_name(logicalrelid, partkey),
		       colocationid = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'accounts'::regclass)
		FROM pg_dist_partition ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var table, column string
		var withAccounts bool
		if err := rows.Scan(&table, &column, &withAccounts); err != nil {
			t.Fatal(err)
		}
		got[table] = fmt.Sprintf("%s colocated=%t", column, withAccounts)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"accounts": "id colocated=true", "ledger": "account_id colocated=true", "decisions": "account_id colocated=true",
		"topups": "account_id colocated=true", "holds": "account_id colocated=true",
		"stripe_events": "event_id colocated=false", "dedupe_claims": "dedupe_key colocated=false",
	}
	for table, w := range want {
		if got[table] != w {
			t.Errorf("%s distributed as %q, want %q", table, got[table], w)
		}
	}
	var seedIndex, perAccount bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('ledger_dedupe_idx') IS NOT NULL, to_regclass('ledger_account_dedupe_idx') IS NOT NULL`).
		Scan(&seedIndex, &perAccount); err != nil {
		t.Fatal(err)
	}
	if seedIndex || !perAccount {
		t.Errorf("ledger_dedupe_idx present=%t, ledger_account_dedupe_idx present=%t", seedIndex, perAccount)
	}
}

func createAccount(t *testing.T, id string, balance int64) {
	t.Helper()
	if _, err := dbtest.Ledger(t, pool).CreateAccount(context.Background(), id, "usd", balance); err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
}

func balanceOf(t *testing.T, id string) (balance, held int64) {
	t.Helper()
	acct, err := db.GetAccount(context.Background(), pool, id)
	if err != nil {
		t.Fatal(err)
	}
	return acct.Balance, acct.Held
}

func processor() *stripeevents.Processor {
	return &stripeevents.Processor{Pool: pool, Ledger: db.NewLedger(pool, db.LedgerConfig{Distributed: true}), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func event(id, eventType string, object map[string]any) []byte {
	body, err := json.Marshal(map[string]any{
		"id": id, "object": "event", "type": eventType, "api_version": "2024-06-20", "created": 1767225600,
		"livemode": false, "data": map[string]any{"object": object},
	})
	if err != nil {
		panic(err)
	}
	return body
}

func paidSession(session, paymentIntent, account string, amount int64) map[string]any {
	return map[string]any{
		"id": session, "object": "checkout.session", "payment_status": "paid", "amount_total": amount,
		"currency": "usd", "payment_intent": paymentIntent, "metadata": map[string]any{"account_id": account},
	}
}

// One event delivered 64 times at once, over the cluster: recorded once (stripe_events by event id),
// credited once (the topup's key claimed once in dedupe_claims), the balance exact.
func TestCitusOneEventDeliveredSixtyFourTimesCreditsOnce(t *testing.T) {
	ctx := context.Background()
	createAccount(t, "acct_storm", 0)
	p := processor()
	body := event("evt_storm", "checkout.session.completed", paidSession("cs_storm", "pi_storm", "acct_storm", 2500))
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		credited int
		errs     []error
	)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := p.Process(ctx, body)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if res.Credited {
				credited++
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		t.Errorf("delivery: %v", err)
	}
	if credited != 1 {
		t.Fatalf("credited %d times, want once", credited)
	}
	if balance, _ := balanceOf(t, "acct_storm"); balance != 2500 {
		t.Fatalf("balance %d, want 2500", balance)
	}
	var entries int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM ledger WHERE account_id = 'acct_storm'`).Scan(&entries); err != nil || entries != 1 {
		t.Fatalf("entries %d (%v), want 1", entries, err)
	}
}

// permutations returns every order of n items.
func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, rest := range permutations(n - 1) {
		for i := 0; i <= len(rest); i++ {
			p := append(append(append([]int{}, rest[:i]...), n-1), rest[i:]...)
			out = append(out, p)
		}
	}
	return out
}

// Every order of a payment's events — its completion, two refunds, a dispute lost — ends at the same
// ledger: a refund arriving before its payment parks and is re-applied when the payment is recorded.
func TestCitusEveryOrderOfAPaymentsEventsPostsTheSame(t *testing.T) {
	ctx := context.Background()
	p := processor()
	for n, order := range permutations(4) {
		account := fmt.Sprintf("acct_order_%d", n)
		pi := fmt.Sprintf("pi_order_%d", n)
		createAccount(t, account, 0)
		events := [][]byte{
			event(fmt.Sprintf("evt_o%d_paid", n), "checkout.session.completed", paidSession("cs_order_"+fmt.Sprint(n), pi, account, 1000)),
			event(fmt.Sprintf("evt_o%d_re1", n), "refund.created", map[string]any{
				"id": fmt.Sprintf("re_o%d_1", n), "object": "refund", "amount": 300, "currency": "usd", "status": "succeeded", "payment_intent": pi,
			}),
			event(fmt.Sprintf("evt_o%d_re2", n), "refund.created", map[string]any{
				"id": fmt.Sprintf("re_o%d_2", n), "object": "refund", "amount": 200, "currency": "usd", "status": "succeeded", "payment_intent": pi,
			}),
			event(fmt.Sprintf("evt_o%d_dp", n), "charge.dispute.created", map[string]any{
				"id": fmt.Sprintf("dp_o%d", n), "object": "dispute", "amount": 100, "currency": "usd", "status": "needs_response",
				"reason": "fraudulent", "payment_intent": pi, "charge": fmt.Sprintf("ch_o%d", n),
			}),
		}
		for _, i := range order {
			if _, err := p.Process(ctx, events[i]); err != nil {
				t.Fatalf("order %v, event %d: %v", order, i, err)
			}
		}
		// Each delivered again, in reverse: nothing moves.
		for i := len(events) - 1; i >= 0; i-- {
			if res, err := p.Process(ctx, events[i]); err != nil || !res.Duplicate {
				t.Fatalf("order %v, redelivery of %d: %+v %v", order, i, res, err)
			}
		}
		if balance, _ := balanceOf(t, account); balance != 400 {
			t.Fatalf("order %v: balance %d, want 1000 - 300 - 200 - 100 = 400", order, balance)
		}
	}
}

// A dedupe key is global across shards: reused with another account (on another shard, or another node)
// it is a conflict, never a second posting, also when both race.
func TestCitusKeyReusedWithAnotherAccountConflicts(t *testing.T) {
	ctx := context.Background()
	accounts := []string{"acct_reuse_a", "acct_reuse_b", "acct_reuse_c", "acct_reuse_d"}
	for _, a := range accounts {
		createAccount(t, a, 0)
	}
	post := func(account, key string) (db.Posted, error) {
		var out db.Posted
		err := db.InTx(ctx, pool, func(tx db.Tx) error {
			var err error
			out, err = new(db.Ledger).Post(ctx, tx, db.Posting{AccountID: account, Kind: db.KindGrant, Amount: 10, DedupeKey: key})
			return err
		})
		return out, err
	}
	if first, err := post("acct_reuse_a", "grant:reuse"); err != nil || !first.New {
		t.Fatalf("first posting: %+v %v", first, err)
	}
	for _, a := range accounts[1:] {
		if _, err := post(a, "grant:reuse"); !errors.Is(err, db.ErrDedupeConflict) {
			t.Fatalf("key reused with %s: %v, want ErrDedupeConflict", a, err)
		}
	}
	if again, err := post("acct_reuse_a", "grant:reuse"); err != nil || again.New {
		t.Fatalf("exact replay: %+v %v", again, err)
	}

	// Racing: 64 postings of one fresh key spread over the four accounts.
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		posted    int
		conflicts int
	)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := post(accounts[i%len(accounts)], "grant:race")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, db.ErrDedupeConflict):
				conflicts++
			case err != nil:
				t.Errorf("posting: %v", err)
			case out.New:
				posted++
			}
		}()
	}
	wg.Wait()
	if posted != 1 || conflicts != 48 {
		t.Fatalf("posted %d, conflicts %d; want 1 and 48 (the other three accounts' 16 each)", posted, conflicts)
	}
	var entries int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM ledger WHERE dedupe_key IN ('grant:reuse', 'grant:race')`).Scan(&entries); err != nil || entries != 2 {
		t.Fatalf("entries under the two keys: %d (%v), want 2", entries, err)
	}
}

// Two reconcilers bill 20,000 decisions over 50 accounts at once, with chunks overlapping at shifting
// boundaries: each decision billed exactly once, every balance exact.
func TestCitusRacingReconcilersBillEachDecisionOnce(t *testing.T) {
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO accounts (id, currency) SELECT 'acct_bill_' || g, 'usd' FROM generate_series(1, 50) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO decisions (id, account_id, cost)
		SELECT 'dec_bill_' || g, 'acct_bill_' || (g % 50 + 1), g % 7 + 1 FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	if lag, err := db.MeasureBillingLag(ctx, pool, 1000); err != nil || lag.Unbilled != 1000 {
		t.Fatalf("billing lag before billing: %+v %v, want 1000 unbilled", lag, err)
	}
	reconcilers := []*reconcile.Reconciler{
		reconcile.New(reconcile.Deps{Pool: pool, Ledger: dbtest.Ledger(t, pool)}, reconcile.Options{ChunkSize: 2000}),
		reconcile.New(reconcile.Deps{Pool: pool, Ledger: dbtest.Ledger(t, pool)}, reconcile.Options{ChunkSize: 3000}),
	}
	reports := make([]reconcile.BillReport, len(reconcilers))
	errs := make([]error, len(reconcilers))
	var wg sync.WaitGroup
	for i, r := range reconcilers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reports[i], errs[i] = r.Bill(ctx, 0)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("reconciler %d: %v", i, err)
		}
	}
	if billed := reports[0].Billed + reports[1].Billed; billed != 20000 {
		t.Fatalf("billed %d + %d, want 20000 in all", reports[0].Billed, reports[1].Billed)
	}
	var matched, usage, wrong int64
	err := pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM decisions d JOIN ledger l ON l.account_id = d.account_id AND l.dedupe_key = 'decision:' || d.id
		         WHERE d.id LIKE 'dec_bill_%' AND l.kind = 'usage' AND l.amount = -d.cost),
		       (SELECT count(*) FROM ledger WHERE kind = 'usage' AND account_id LIKE 'acct_bill_%'),
		       (SELECT count(*) FROM accounts a
		         WHERE a.id LIKE 'acct_bill_%'
		           AND a.balance <> -(SELECT sum(cost) FROM decisions d WHERE d.account_id = a.id))`).Scan(&matched, &usage, &wrong)
	if err != nil {
		t.Fatal(err)
	}
	if matched != 20000 || usage != 20000 || wrong != 0 {
		t.Fatalf("billed as expected %d, usage entries %d, wrong balances %d", matched, usage, wrong)
	}
	if lag, err := db.MeasureBillingLag(ctx, pool, 1000); err != nil || lag.Unbilled != 0 {
		t.Fatalf("billing lag after billing: %+v %v, want none", lag, err)
	}
	// Re-reading posts nothing.
	again, err := reconcilers[0].Bill(ctx, 0)
	if err != nil || again.Billed != 0 {
		t.Fatalf("re-read: %+v %v", again, err)
	}
}

// Concurrent holds on one account reserve exactly what is available, and each resolves once.
func TestCitusConcurrentHoldsOnOneAccount(t *testing.T) {
	ctx := context.Background()
	createAccount(t, "acct_holds", 1000)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		granted []string
		short   int
	)
	// Half alone, half through the authoriser that groups an account's authorisations.
	authoriser := dbtest.Ledger(t, pool, db.LedgerConfig{Groups: db.GroupOptions{}})
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("hold_%d", i)
			var err error
			if i%2 == 0 {
				_, err = db.AuthoriseHold(ctx, pool, "acct_holds", id, 50, time.Hour)
			} else {
				_, err = authoriser.AuthoriseHoldGrouped(ctx, "acct_holds", id, 50, time.Hour)
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, db.ErrInsufficientBalance):
				short++
			case err != nil:
				t.Errorf("authorise %s: %v", id, err)
			default:
				granted = append(granted, id)
			}
		}()
	}
	wg.Wait()
	if len(granted) != 20 || short != 20 {
		t.Fatalf("granted %d, refused %d; want 20 and 20", len(granted), short)
	}
	if balance, held := balanceOf(t, "acct_holds"); balance != 1000 || held != 1000 {
		t.Fatalf("balance %d held %d, want 1000 and 1000", balance, held)
	}
	// Each granted hold captured and voided at once: exactly one of the two wins.
	var captured, voided int
	for _, id := range granted {
		var capErr, voidErr error
		var inner sync.WaitGroup
		inner.Add(2)
		go func() { defer inner.Done(); _, capErr = dbtest.Ledger(t, pool).CaptureHold(ctx, "acct_holds", id, 30) }()
		go func() { defer inner.Done(); _, voidErr = db.VoidHold(ctx, pool, "acct_holds", id) }()
		inner.Wait()
		hold, err := db.GetHold(ctx, pool, "acct_holds", id)
		if err != nil {
			t.Fatal(err)
		}
		switch hold.Status {
		case "captured":
			captured++
		case "voided":
			voided++
		default:
			t.Fatalf("hold %s is %s after capture (%v) and void (%v)", id, hold.Status, capErr, voidErr)
		}
	}
	balance, held := balanceOf(t, "acct_holds")
	if held != 0 || balance != 1000-int64(captured)*30 || captured+voided != 20 {
		t.Fatalf("balance %d held %d after %d captures and %d voids", balance, held, captured, voided)
	}
}

// The API's poster on one hot account: 64 concurrent postings, each delivered twice, and no-overdraw
// debits racing them: every key posted once, the balance never below zero, the chain exact (verify).
func TestCitusPosterOnOneAccount(t *testing.T) {
	ctx := context.Background()
	createAccount(t, "acct_hot", 0)
	poster := dbtest.Ledger(t, pool, db.LedgerConfig{Groups: db.GroupOptions{}})
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		posted   int
		replays  int
		debited  int64
		refusals int
	)
	for i := range 128 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := db.Posting{AccountID: "acct_hot", Kind: db.KindGrant, Amount: 10, DedupeKey: fmt.Sprintf("grant:hot:%d", i/2)}
			if i%4 == 3 {
				p = db.Posting{AccountID: "acct_hot", Kind: db.KindAdjustment, Amount: -25, DedupeKey: fmt.Sprintf("adj:hot:%d", i), NoOverdraw: true}
			}
			out, err := poster.PostGrouped(ctx, p)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, db.ErrInsufficientBalance):
				refusals++
			case err != nil:
				t.Errorf("post %+v: %v", p, err)
			case out.New && p.Amount < 0:
				debited -= p.Amount
			case out.New:
				posted++
			default:
				replays++
			}
		}()
	}
	wg.Wait()
	// 96 grant deliveries of 64 keys, some of whose pairs hold a debit instead: count what was asked.
	if balance, _ := balanceOf(t, "acct_hot"); balance != int64(posted)*10-debited || balance < 0 {
		t.Fatalf("balance %d, want %d grants of 10 less %d debited", balance, posted, debited)
	}
	var keys, entries int
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT dedupe_key), count(*) FROM ledger WHERE account_id = 'acct_hot'`).Scan(&keys, &entries); err != nil {
		t.Fatal(err)
	}
	if keys != entries || entries != posted+int(debited/25) {
		t.Fatalf("%d entries under %d keys; posted %d grants and %d debits", entries, keys, posted, debited/25)
	}
	if posted+replays != 96 {
		t.Fatalf("grants: %d posted + %d replays, want 96 deliveries", posted, replays)
	}
}

// The rules the database holds on the shards: an entry that does not continue its account's chain is
// refused as ledger_chain (ErrChainBroken), an entry is never changed (ledger_append_only, ErrAppendOnly),
// and a refused entry moves nothing.
func TestCitusChainAndAppendOnlyHoldOnShards(t *testing.T) {
	ctx := context.Background()
	createAccount(t, "acct_rules", 0)
	insert := func(seq, balanceAfter int64) error {
		_, err := pool.Exec(ctx, `INSERT INTO ledger (account_id, kind, amount, seq, balance_after)
		                          VALUES ('acct_rules', 'grant', 10, $1, $2)`, seq, balanceAfter)
		return db.MapError(err)
	}
	if err := insert(1, 10); err != nil {
		t.Fatalf("first entry of the chain: %v", err)
	}
	// A repeated position is refused by ledger_account_seq_key, as on plain PostgreSQL.
	if err := insert(1, 20); err == nil {
		t.Error("a second entry at seq 1 was accepted")
	}
	for _, bad := range [][2]int64{{3, 20}, {2, 25}} {
		if err := insert(bad[0], bad[1]); !errors.Is(err, db.ErrChainBroken) {
			t.Errorf("entry seq %d balance_after %d: %v, want ErrChainBroken", bad[0], bad[1], err)
		}
	}
	if err := insert(2, 20); err != nil {
		t.Fatalf("entry continuing the chain: %v", err)
	}
	// Constraints checked on the shards keep their meaning too.
	if _, err := pool.Exec(ctx, `INSERT INTO ledger (account_id, kind, amount, seq, balance_after)
	                             VALUES ('acct_rules', 'grant', -10, 3, 10)`); !errors.Is(db.MapError(err), db.ErrInvalidAmount) {
		t.Errorf("a negative grant: %v, want ErrInvalidAmount", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO ledger (account_id, kind, amount, seq, balance_after)
	                             VALUES ('acct_rules_missing', 'grant', 10, 1, 10)`); !errors.Is(db.MapError(err), db.ErrAccountNotFound) {
		t.Errorf("an entry of a missing account: %v, want ErrAccountNotFound", err)
	}
	if balance, _ := balanceOf(t, "acct_rules"); balance != 20 {
		t.Fatalf("balance %d, want 20: refused entries moved it", balance)
	}
	for _, change := range []string{
		`UPDATE ledger SET amount = 11 WHERE account_id = 'acct_rules'`,
		`DELETE FROM ledger WHERE account_id = 'acct_rules'`,
	} {
		if _, err := pool.Exec(ctx, change); !errors.Is(db.MapError(err), db.ErrAppendOnly) {
			t.Errorf("%s: %v, want ErrAppendOnly", change, err)
		}
	}
}
