package db_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

func post(t *testing.T, pool *pgxpool.Pool, p db.Posting) (db.Posted, error) {
	t.Helper()
	var out db.Posted
	err := db.InTx(context.Background(), pool, func(tx pgx.Tx) error {
		var err error
		out, err = ledger.Post(context.Background(), tx, p)
		return err
	})
	return out, err
}

func createAccount(t *testing.T, pool *pgxpool.Pool, id string) {
	t.Helper()
	if _, err := dbtest.Ledger(t, pool).CreateAccount(context.Background(), id, "usd", 0); err != nil {
		t.Fatalf("create account %s: %v", id, err)
	}
}

func balance(t *testing.T, pool *pgxpool.Pool, id string) int64 {
	t.Helper()
	acct, err := db.GetAccount(context.Background(), pool, id)
	if err != nil {
		t.Fatalf("get account %s: %v", id, err)
	}
	return acct.Balance
}

func count(t *testing.T, pool *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func TestPostSameKeyConcurrentlyPostsOnce(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	createAccount(t, pool, "acct_race")

	const n = 64
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		mu       sync.Mutex
		posted   int
		replayed int
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out, err := post(t, pool, db.Posting{AccountID: "acct_race", Kind: db.KindTopup, Amount: 1000, DedupeKey: "stripe:evt_race"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("post: %v", err)
			case out.New:
				posted++
			default:
				replayed++
			}
		}()
	}
	close(start)
	wg.Wait()

	if posted != 1 || replayed != n-1 {
		t.Fatalf("posted %d, replayed %d; want 1 and %d", posted, replayed, n-1)
	}
	if got := count(t, pool, `SELECT count(*) FROM ledger WHERE dedupe_key = 'stripe:evt_race'`); got != 1 {
		t.Fatalf("ledger rows = %d, want 1", got)
	}
	if got := balance(t, pool, "acct_race"); got != 1000 {
		t.Fatalf("balance = %d, want 1000", got)
	}
}

// A statement whose every entry is left out by its keys (ON CONFLICT DO NOTHING) inserts nothing, and the
// ledger's statement triggers, which run all the same over no rows, neither fail nor change anything.
// Under TestPostSameKeyConcurrentlyPostsOnce on Citus, ledger_append's insert comes to this: the key's
// entry is visible (its transaction committed on the account's node) by the time the insert runs, not
// yet its claim when the keys were read (still committing on the claim's node).
func TestLedgerInsertLeavingOutEveryEntryChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	createAccount(t, pool, "acct_none")
	if _, err := post(t, pool, db.Posting{AccountID: "acct_none", Kind: db.KindTopup, Amount: 500, DedupeKey: "k:none"}); err != nil {
		t.Fatal(err)
	}
	tag, err := pool.Exec(ctx, `INSERT INTO ledger (account_id, kind, amount, description, dedupe_key, seq, balance_after)
		VALUES ('acct_none', 'topup', 500, '', 'k:none', 1, 500) ON CONFLICT DO NOTHING`)
	if err != nil || tag.RowsAffected() != 0 {
		t.Fatalf("an insert its key leaves out: %v rows, %v; want none and no error", tag.RowsAffected(), err)
	}
	if got := balance(t, pool, "acct_none"); got != 500 {
		t.Fatalf("balance = %d, want 500", got)
	}
}

// ledger_insert writes a plan's rows with one statement on plain PostgreSQL; its Citus form writes up to
// 1,000 rows as one INSERT ... VALUES (literals) and more with an INSERT ... SELECT per shard. The same
// plan of 1,200 rows over 24 accounts (on Citus, every shard), posted in one call and in three calls of 400
// on other accounts, leaves the same entries, lots and balances, every column compared: what ledger_append
// posts does not depend on the form that wrote it.
func TestLedgerAppendPostsAlikeInOneCallOrMany(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	const accounts, rows = 24, 1200
	for _, set := range []string{"one", "many"} {
		for a := range accounts {
			createAccount(t, pool, fmt.Sprintf("acct_%s_%02d", set, a))
		}
	}
	// Credits with every kind of lot terms and cost, debits with who and what, descriptions that need quoting.
	type plan struct {
		accounts, kinds, descriptions, keys, intents, categories, expiresAt, subjects, features, currencies, onBehalfOf []string
		amounts, costs                                                                                                  []int64
		priorities                                                                                                      []int16
		ttls                                                                                                            []float64
	}
	build := func(set string, from, to int) plan {
		var p plan
		for i := from; i < to; i++ {
			credit := i%3 != 2
			amount := int64(100 + i)
			kind := "topup"
			if !credit {
				amount, kind = -int64(1+i%7), "usage"
			} else if i%2 == 1 {
				kind = "grant"
			}
			p.accounts = append(p.accounts, fmt.Sprintf("acct_%s_%02d", set, i%accounts))
			p.kinds = append(p.kinds, kind)
			p.amounts = append(p.amounts, amount)
			p.descriptions = append(p.descriptions, fmt.Sprintf("row %d: it's \\ \"%s\", 100%%", i, kind))
			p.keys = append(p.keys, map[bool]string{true: fmt.Sprintf("alike:%s:%d", set, i), false: ""}[i%5 != 0])
			p.intents = append(p.intents, map[bool]string{true: fmt.Sprintf("pi_%d", i), false: ""}[i%4 == 0])
			p.categories = append(p.categories, []string{"", "paid", "promotional"}[i%3])
			p.priorities = append(p.priorities, int16(i%101))
			p.expiresAt = append(p.expiresAt, map[bool]string{true: "2031-02-03T04:05:06.789012Z", false: ""}[i%4 == 1])
			p.ttls = append(p.ttls, float64(i%3)*3600.5)
			p.costs = append(p.costs, int64(i%4)*25)
			p.currencies = append(p.currencies, map[bool]string{true: "usd", false: ""}[i%2 == 0])
			p.subjects = append(p.subjects, map[bool]string{true: fmt.Sprintf("user_%d@example.com", i%9), false: ""}[i%2 == 1])
			p.features = append(p.features, map[bool]string{true: "chat.tokens", false: ""}[i%3 == 2])
			p.onBehalfOf = append(p.onBehalfOf, map[bool]string{true: fmt.Sprintf("member_%d", i%5), false: ""}[!credit && i%2 == 0])
		}
		return p
	}
	appendPlan := func(p plan) int {
		t.Helper()
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM ledger_append($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[],
			p_payment_intents => $6::text[], p_lot_categories => $7::text[], p_lot_priorities => $8::smallint[],
			p_lot_expires_at => $9::text[], p_lot_ttls => $10::double precision[], p_subjects => $11::text[],
			p_features => $12::text[], p_lot_cost_amounts => $13::bigint[], p_lot_cost_currencies => $14::text[],
			p_on_behalf_of => $15::text[])`,
			p.accounts, p.kinds, p.amounts, p.descriptions, p.keys, p.intents, p.categories, p.priorities, p.expiresAt,
			p.ttls, p.subjects, p.features, p.costs, p.currencies, p.onBehalfOf).Scan(&n)
		if err != nil {
			t.Fatalf("ledger_append of %d rows: %v", len(p.accounts), err)
		}
		return n
	}
	if n := appendPlan(build("one", 0, rows)); n != rows {
		t.Fatalf("one call posted %d entries, want %d", n, rows)
	}
	for from := 0; from < rows; from += 400 {
		if n := appendPlan(build("many", from, from+400)); n != 400 {
			t.Fatalf("the call of rows %d to %d posted %d entries, want 400", from, from+400, n)
		}
	}
	// Each set's rows as a row's text (a NULL is empty), by account (its number) and seq; a lifetime's
	// expiry from created_at.
	read := func(set string) []string {
		t.Helper()
		rows, err := pool.Query(ctx, `
			SELECT ROW(right(l.account_id, 2), l.seq, l.kind, l.amount, l.description,
			                 replace(l.dedupe_key, $1, ''), l.payment_intent, l.balance_after, l.lot_id, l.reverses_entry_id,
			                 l.lot_category, l.lot_priority,
			                 CASE WHEN l.lot_expires_at = '2031-02-03T04:05:06.789012Z' THEN 'at ' || l.lot_expires_at::text
			                      ELSE (l.lot_expires_at - l.created_at)::text END,
			                 l.subject, l.feature, l.lot_cost_amount, l.lot_cost_currency, l.on_behalf_of,
			                 c.category, c.priority, c.amount, c.remaining, c.cost_amount, c.cost_currency,
			                 a.balance, a.last_seq)::text
			FROM ledger l
			JOIN accounts a ON a.id = l.account_id
			LEFT JOIN credit_lots c ON c.account_id = l.account_id AND c.entry_id = l.id
			WHERE l.account_id LIKE $2
			ORDER BY right(l.account_id, 2), l.seq`, "alike:"+set+":", "acct_"+set+"_%")
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	one, many := read("one"), read("many")
	if len(one) != rows || len(many) != rows {
		t.Fatalf("%d and %d entries stored, want %d each", len(one), len(many), rows)
	}
	for i := range one {
		if one[i] != many[i] {
			t.Errorf("entry %d posted in one call:\n  %s\nin three:\n  %s", i, one[i], many[i])
		}
	}
}

// One key posted 64 times at once, spread over four accounts (on Citus, over shards and nodes): one
// entry; the other accounts' postings are conflicts, never a second entry, whoever wins.
func TestKeyRacedOverFourAccountsPostsOnce(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	accounts := []string{"acct_race_a", "acct_race_b", "acct_race_c", "acct_race_d"}
	for _, a := range accounts {
		createAccount(t, pool, a)
	}
	var (
		wg                sync.WaitGroup
		mu                sync.Mutex
		posted, conflicts int
		winner            string
	)
	for i := range 64 {
		wg.Go(func() {
			account := accounts[i%len(accounts)]
			out, err := post(t, pool, db.Posting{AccountID: account, Kind: db.KindGrant, Amount: 10, DedupeKey: "grant:race"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, db.ErrDedupeConflict):
				conflicts++
			case err != nil:
				t.Errorf("posting: %v", err)
			case out.New:
				posted++
				winner = account
			}
		})
	}
	wg.Wait()
	if posted != 1 || conflicts != 48 {
		t.Fatalf("posted %d, conflicts %d; want 1 and 48 (the other three accounts' 16 each)", posted, conflicts)
	}
	if n := count(t, pool, `SELECT count(*) FROM ledger WHERE dedupe_key = 'grant:race'`); n != 1 {
		t.Fatalf("%d entries under the key, want 1", n)
	}
	if got := balance(t, pool, winner); got != 10 {
		t.Fatalf("%s balance %d, want 10", winner, got)
	}
}

// A posting whose key another account's writer holds while that writer is still committing answers
// the conflict, with the writer's entry, once the writer has committed. On Citus this is the race above
// seen slowly: a two-phase commit reaches the claim's node and the entry's one after the other, so the
// loser can see the claim and not yet the entry. Here the claim others see is committed before the
// writer begins, and the writer claims the key again under it (deleting the committed claim, which
// others still see until it commits). On plain PostgreSQL the loser waits on the key's index instead.
func TestKeyHeldByACommittingWriterIsAConflict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	createAccount(t, pool, "acct_writer")
	createAccount(t, pool, "acct_loser")
	const key = "grant:committing"
	if dbtest.OnCitus() {
		if _, err := pool.Exec(ctx, `INSERT INTO dedupe_claims (dedupe_key, account_id) VALUES ($1, 'acct_writer')`, key); err != nil {
			t.Fatal(err)
		}
	}
	writer, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Rollback(ctx)
	if dbtest.OnCitus() {
		if _, err := writer.Exec(ctx, `DELETE FROM dedupe_claims WHERE dedupe_key = $1`, key); err != nil {
			t.Fatal(err)
		}
	}
	written, err := ledger.Post(ctx, writer, db.Posting{AccountID: "acct_writer", Kind: db.KindGrant, Amount: 10, DedupeKey: key})
	if err != nil || !written.New {
		t.Fatalf("writer's posting = %+v, %v", written, err)
	}

	type answer struct {
		out db.Posted
		err error
	}
	done := make(chan answer, 1)
	go func() {
		out, err := post(t, pool, db.Posting{AccountID: "acct_loser", Kind: db.KindGrant, Amount: 10, DedupeKey: key})
		done <- answer{out, err}
	}()
	select {
	case a := <-done:
		t.Fatalf("the loser answered before the writer committed: %+v, %v", a.out, a.err)
	case <-time.After(500 * time.Millisecond):
		// The loser is waiting for the writer, as it must.
	}
	if err := writer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if !errors.Is(a.err, db.ErrDedupeConflict) || a.out.Entry.ID != written.Entry.ID {
		t.Fatalf("loser = %+v, %v; want ErrDedupeConflict with the writer's entry %d", a.out, a.err, written.Entry.ID)
	}
	if got := balance(t, pool, "acct_loser"); got != 0 {
		t.Fatalf("loser's balance %d, want 0", got)
	}
}

func TestPostReplayAndConflict(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	createAccount(t, pool, "acct_a")
	createAccount(t, pool, "acct_b")

	first := db.Posting{AccountID: "acct_a", Kind: db.KindTopup, Amount: 500, DedupeKey: "stripe:evt_1"}
	out, err := post(t, pool, first)
	if err != nil || !out.New || out.Entry.BalanceAfter != 500 {
		t.Fatalf("first post = %+v, %v; want posted with balance 500", out, err)
	}

	replay, err := post(t, pool, first)
	if err != nil || replay.New {
		t.Fatalf("replay = %+v, %v; want posted=false, nil", replay, err)
	}
	if replay.Entry.ID != out.Entry.ID {
		t.Fatalf("replay returned entry %d, want the original %d", replay.Entry.ID, out.Entry.ID)
	}

	conflicts := map[string]db.Posting{
		"amount":  {AccountID: "acct_a", Kind: db.KindTopup, Amount: 501, DedupeKey: "stripe:evt_1"},
		"account": {AccountID: "acct_b", Kind: db.KindTopup, Amount: 500, DedupeKey: "stripe:evt_1"},
		"kind":    {AccountID: "acct_a", Kind: db.KindGrant, Amount: 500, DedupeKey: "stripe:evt_1"},
	}
	for name, p := range conflicts {
		if _, err := post(t, pool, p); !errors.Is(err, db.ErrDedupeConflict) {
			t.Errorf("%s differs: err = %v, want ErrDedupeConflict", name, err)
		}
	}
	if got := count(t, pool, `SELECT count(*) FROM ledger`); got != 1 {
		t.Fatalf("ledger rows = %d, want 1: a conflict must write nothing", got)
	}
	if a, b := balance(t, pool, "acct_a"), balance(t, pool, "acct_b"); a != 500 || b != 0 {
		t.Fatalf("balances = %d, %d; want 500, 0", a, b)
	}
}

func TestPostUnknownAccount(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	_, err := post(t, pool, db.Posting{AccountID: "nobody", Kind: db.KindTopup, Amount: 1, DedupeKey: "k"})
	if !errors.Is(err, db.ErrAccountNotFound) {
		t.Fatalf("err = %v, want ErrAccountNotFound", err)
	}
}

// The database itself, not Go, refuses a wrong sign and any change to an entry.
func TestSchemaRefusesWhatGoNeverSends(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	createAccount(t, pool, "acct_raw")
	if _, err := post(t, pool, db.Posting{AccountID: "acct_raw", Kind: db.KindTopup, Amount: 100, DedupeKey: "k1"}); err != nil {
		t.Fatal(err)
	}

	wrongSigns := []struct {
		kind   string
		amount int64
	}{
		{"topup", -1}, {"grant", 0}, {"refund_restore", -5}, {"dispute_won", -5},
		{"usage", 1}, {"refund", 5}, {"dispute", 5}, {"adjustment", 0}, {"bonus", 5},
	}
	for _, c := range wrongSigns {
		_, err := pool.Exec(ctx, `INSERT INTO ledger (account_id, kind, amount) VALUES ('acct_raw', $1, $2)`, c.kind, c.amount)
		if err == nil {
			t.Errorf("raw insert of %s %d was accepted", c.kind, c.amount)
		}
	}
	rightSigns := []struct {
		kind   string
		amount int64
	}{
		{"topup", 1}, {"grant", 1}, {"refund_restore", 1}, {"dispute_won", 1},
		{"usage", -1}, {"refund", -1}, {"dispute", -1}, {"adjustment", 1}, {"adjustment", -1},
	}
	for _, c := range rightSigns {
		if _, err := pool.Exec(ctx, `INSERT INTO ledger (account_id, kind, amount, seq, balance_after)
			SELECT id, $1, $2::bigint, last_seq + 1, balance + $2::bigint FROM accounts WHERE id = 'acct_raw'`, c.kind, c.amount); err != nil {
			t.Errorf("raw insert of %s %d refused: %v", c.kind, c.amount, err)
		}
	}

	// An entry that does not continue the chain (a hole in seq, a wrong balance_after, a balance_after
	// that does not start from the cached balance) is refused by ledger_chain.
	for _, chain := range []string{
		`SELECT id, 'adjustment', 5, last_seq + 2, balance + 5 FROM accounts WHERE id = 'acct_raw'`,
		`SELECT id, 'adjustment', 5, last_seq + 1, balance + 6 FROM accounts WHERE id = 'acct_raw'`,
		`SELECT id, 'adjustment', 5, last_seq + k, balance + 5 * k FROM accounts, generate_series(1, 3) k WHERE id = 'acct_raw' AND k <> 2`,
	} {
		_, err := pool.Exec(ctx, `INSERT INTO ledger (account_id, kind, amount, seq, balance_after) `+chain)
		if !errors.Is(db.MapError(err), db.ErrChainBroken) {
			t.Errorf("entries %q: err = %v, want ErrChainBroken", chain, err)
		}
	}
	if b := balance(t, pool, "acct_raw"); b != 101 {
		t.Fatalf("balance %d after the raw entries, want 101 (100 and the right signs' 1)", b)
	}

	for _, stmt := range []string{
		`UPDATE ledger SET amount = 1000000 WHERE dedupe_key = 'k1'`,
		`DELETE FROM ledger WHERE dedupe_key = 'k1'`,
		`TRUNCATE ledger`,
	} {
		if _, err := pool.Exec(ctx, stmt); err == nil {
			t.Errorf("%s was accepted", stmt)
		}
	}
	if got := count(t, pool, `SELECT count(*) FROM ledger WHERE dedupe_key = 'k1' AND amount = 100`); got != 1 {
		t.Fatalf("entry k1 changed or vanished")
	}
}

func TestCreateAccountConcurrentlyGrantsOnce(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)

	const n = 20
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		mu      sync.Mutex
		created int
		granted int
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out, err := dbtest.Ledger(t, pool).CreateAccount(context.Background(), "acct_signup", "eur", 250)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("create: %v", err)
				return
			}
			if out.Created {
				created++
			}
			if out.Granted {
				granted++
			}
		}()
	}
	close(start)
	wg.Wait()

	if created != 1 || granted != 1 {
		t.Fatalf("created %d, granted %d; want 1 and 1", created, granted)
	}
	if got := count(t, pool, `SELECT count(*) FROM ledger WHERE account_id = 'acct_signup' AND kind = 'grant'`); got != 1 {
		t.Fatalf("grant entries = %d, want 1", got)
	}
	if got := balance(t, pool, "acct_signup"); got != 250 {
		t.Fatalf("balance = %d, want 250", got)
	}
	if _, err := dbtest.Ledger(t, pool).CreateAccount(context.Background(), "acct_signup", "usd", 250); !errors.Is(err, db.ErrCurrencyMismatch) {
		t.Fatalf("other currency: err = %v, want ErrCurrencyMismatch", err)
	}
}

func TestNoOverdrawRefusesBelowZero(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	createAccount(t, pool, "acct_low")
	if _, err := post(t, pool, db.Posting{AccountID: "acct_low", Kind: db.KindAdjustment, Amount: 100, DedupeKey: "api:acct_low:1", NoOverdraw: true}); err != nil {
		t.Fatal(err)
	}
	_, err := post(t, pool, db.Posting{AccountID: "acct_low", Kind: db.KindAdjustment, Amount: -101, DedupeKey: "api:acct_low:2", NoOverdraw: true})
	if !errors.Is(err, db.ErrInsufficientBalance) {
		t.Fatalf("err = %v, want ErrInsufficientBalance", err)
	}
	if got := count(t, pool, `SELECT count(*) FROM ledger WHERE dedupe_key = 'api:acct_low:2'`); got != 0 {
		t.Fatalf("refused debit left %d entries", got)
	}
	if got := balance(t, pool, "acct_low"); got != 100 {
		t.Fatalf("balance = %d, want 100", got)
	}
}

func TestConcurrentDebitsNeverOverdraw(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	createAccount(t, pool, "acct_hot")
	if _, err := post(t, pool, db.Posting{AccountID: "acct_hot", Kind: db.KindAdjustment, Amount: 1000, DedupeKey: "seed"}); err != nil {
		t.Fatal(err)
	}

	const n = 50 // each debits 30: only 33 fit in 1000
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		mu      sync.Mutex
		posted  int
		refused int
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := post(t, pool, db.Posting{AccountID: "acct_hot", Kind: db.KindAdjustment, Amount: -30,
				DedupeKey: fmt.Sprintf("api:acct_hot:%d", i), NoOverdraw: true})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, db.ErrInsufficientBalance):
				refused++
			case err != nil:
				t.Errorf("debit %d: %v", i, err)
			default:
				posted++
			}
		}()
	}
	close(start)
	wg.Wait()

	if posted != 33 || refused != n-33 {
		t.Fatalf("posted %d, refused %d; want 33 and %d", posted, refused, n-33)
	}
	if got := balance(t, pool, "acct_hot"); got != 1000-33*30 {
		t.Fatalf("balance = %d, want %d", got, 1000-33*30)
	}
	var sum int64
	if err := pool.QueryRow(context.Background(), `SELECT sum(amount) FROM ledger WHERE account_id = 'acct_hot'`).Scan(&sum); err != nil {
		t.Fatal(err)
	}
	if sum != balance(t, pool, "acct_hot") {
		t.Fatalf("ledger sum %d differs from balance", sum)
	}
}

func TestVerifyFindsTamperedBalance(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	createAccount(t, pool, "acct_ok")
	createAccount(t, pool, "acct_tampered")
	if _, err := post(t, pool, db.Posting{AccountID: "acct_tampered", Kind: db.KindTopup, Amount: 700, DedupeKey: "k"}); err != nil {
		t.Fatal(err)
	}
	violations, err := db.Verify(ctx, pool, timeNow(), parkedAfter, parkedAfter)
	if err != nil || len(violations) != 0 {
		t.Fatalf("clean ledger: %v, %v; want no violations", violations, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE accounts SET balance = balance + 1 WHERE id = 'acct_tampered'`); err != nil {
		t.Fatal(err)
	}
	violations, err = db.Verify(ctx, pool, timeNow(), parkedAfter, parkedAfter)
	if err != nil {
		t.Fatal(err)
	}
	if len(violations) != 1 || violations[0].Check != "balance" {
		t.Fatalf("violations = %v, want one balance violation", violations)
	}
	if want := "account acct_tampered: cached balance 701 (last seq 1), ledger sum 700, last entry's balance_after 700 (seq 1)"; violations[0].Detail != want {
		t.Fatalf("detail = %q, want %q", violations[0].Detail, want)
	}
}

// A tampered balance_after (the append-only trigger switched off by the table's owner) is reported by
// verify's chain check: the entry itself and the next one, which no longer continues it.
func TestVerifyFindsTamperedBalanceAfter(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	createAccount(t, pool, "acct_chain")
	for i, amount := range []int64{700, -100, 50} {
		kind := db.KindAdjustment
		if i == 0 {
			kind = db.KindTopup
		}
		if _, err := post(t, pool, db.Posting{AccountID: "acct_chain", Kind: kind, Amount: amount, DedupeKey: fmt.Sprintf("k%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := pool.Query(ctx, `SELECT balance_after FROM ledger WHERE account_id = 'acct_chain' ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil || !slices.Equal(chain, []int64{700, 600, 650}) {
		t.Fatalf("balance_after chain = %v, %v; want [700 600 650]", chain, err)
	}
	if violations, err := db.Verify(ctx, pool, timeNow(), parkedAfter, parkedAfter); err != nil || len(violations) != 0 {
		t.Fatalf("clean ledger: %v, %v; want no violations", violations, err)
	}
	err = db.InTx(ctx, pool, func(tx pgx.Tx) error {
		for _, stmt := range []string{
			// On Citus, disabling a distributed table's trigger is an unsafe trigger change it refuses
			// without this setting; on plain PostgreSQL it is an unused custom setting.
			`SET LOCAL citus.enable_unsafe_triggers = on`,
			`ALTER TABLE ledger DISABLE TRIGGER ledger_append_only`,
			`UPDATE ledger SET balance_after = 601 WHERE account_id = 'acct_chain' AND seq = 2`,
			`ALTER TABLE ledger ENABLE TRIGGER ledger_append_only`,
		} {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	violations, err := db.Verify(ctx, pool, timeNow(), parkedAfter, parkedAfter)
	if err != nil {
		t.Fatal(err)
	}
	var details []string
	for _, v := range violations {
		if v.Check != "chain" {
			t.Fatalf("violation %v, want only chain violations", v)
		}
		details = append(details, v.Detail)
	}
	want := []string{
		"account acct_chain: entry 2 (seq 2, amount -100) has balance_after 601, want seq 2 and balance_after 600",
		"account acct_chain: entry 3 (seq 3, amount 50) has balance_after 650, want seq 3 and balance_after 651",
	}
	if !slices.Equal(details, want) {
		t.Fatalf("violations:\n  %s\nwant:\n  %s", strings.Join(details, "\n  "), strings.Join(want, "\n  "))
	}
}
