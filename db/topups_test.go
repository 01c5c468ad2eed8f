package db_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

// payOrder is one element of topups_pay's arrays.
type payOrder struct {
	id, account, session, payment, event, currency string
	amount                                         int64
}

// topupsPay calls topups_pay with the orders and returns the orders it made paid, one line each.
func topupsPay(ctx context.Context, pool *pgxpool.Pool, orders ...payOrder) ([]string, error) {
	var ids, accounts, sessions, payments, events, currencies []string
	var amounts []int64
	for _, o := range orders {
		ids, accounts, sessions, payments = append(ids, o.id), append(accounts, o.account), append(sessions, o.session), append(payments, o.payment)
		events, currencies, amounts = append(events, o.event), append(currencies, o.currency), append(amounts, o.amount)
	}
	rows, err := pool.Query(ctx, `
		SELECT concat_ws(' ', p.id, p.account_id, coalesce(p.session_id, '-'), coalesce(p.payment_intent, '-'), p.amount,
		                 p.credits, p.currency, p.status, p.paid_event_id, p.paid_at IS NOT NULL)
		FROM topups_pay($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[]) AS p`,
		ids, accounts, sessions, payments, events, amounts, currencies)
	if err != nil {
		return nil, err
	}
	paid, err := pgx.CollectRows(rows, pgx.RowTo[string])
	slices.Sort(paid)
	return paid, err
}

// topups_pay, the one statement that pays orders, answers every kind of order in one call the same way
// on both backends (on Citus its own form, statements routed to the shards of their rows): a pending order
// named by its session or by its id is paid when amount and currency match; a session without an order is
// recorded paid on its account, in the account's currency, when the account exists and has that currency;
// nothing else is paid or recorded. A payment that already paid another order, of the same account or of
// another, fails the call as a whole and writes nothing.
func TestTopupsPayAnswersEachOrderInOneCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	l := dbtest.Ledger(t, pool)
	for id, currency := range map[string]string{"acct_p1": "usd", "acct_p2": "usd", "acct_eur": "eur"} {
		if _, err := l.CreateAccount(ctx, id, currency, 0); err != nil {
			t.Fatal(err)
		}
	}
	pending := func(id, account, session string, amount int64) {
		t.Helper()
		if _, _, err := db.InsertPendingTopup(ctx, pool, db.Topup{ID: id, AccountID: account, Amount: amount, Currency: "usd"}); err != nil {
			t.Fatal(err)
		}
		if session != "" {
			if _, err := db.SetTopupSession(ctx, pool, id, session, "https://checkout.example/"+session); err != nil {
				t.Fatal(err)
			}
		}
	}
	pending("top_s1", "acct_p1", "cs_s1", 500)
	pending("top_r1", "acct_p1", "", 300)
	pending("top_amt", "acct_p2", "cs_amt", 400)
	pending("top_done", "acct_p2", "cs_done", 200)
	pending("top_other", "acct_p2", "cs_other", 600)
	if paid, err := topupsPay(ctx, pool, payOrder{"top_done", "acct_p2", "cs_done", "pi_done", "evt_done", "usd", 200}); err != nil || len(paid) != 1 {
		t.Fatalf("pay top_done first: %v %v", paid, err)
	}

	paid, err := topupsPay(ctx, pool,
		payOrder{"ignored", "acct_p1", "cs_s1", "pi_s1", "evt_s1", "usd", 500},             // pending, by its session
		payOrder{"top_r1", "acct_p1", "", "pi_r1", "evt_r1", "USD", 300},                   // pending, by its id
		payOrder{"top_amt", "acct_p2", "cs_amt", "pi_amt", "evt_amt", "usd", 401},          // another amount
		payOrder{"top_done", "acct_p2", "cs_done", "pi_done2", "evt_done2", "usd", 200},    // paid before
		payOrder{"top_x", "acct_p1", "cs_other", "pi_other", "evt_other", "usd", 600},      // another account's session
		payOrder{"top_new", "acct_p1", "cs_new", "pi_new", "evt_new", "usd", 250},          // no order yet
		payOrder{"top_cur", "acct_p2", "cs_cur", "pi_cur", "evt_cur", "eur", 250},          // not the account's currency
		payOrder{"top_ghost", "acct_ghost", "cs_ghost", "pi_ghost", "evt_ghost", "usd", 9}, // no such account
		payOrder{"top_eur", "acct_eur", "cs_eur", "", "evt_eur", "EUR", 700},               // no order, no payment yet
	)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"top_eur acct_eur cs_eur - 700 700 eur paid evt_eur t",
		"top_new acct_p1 cs_new pi_new 250 250 usd paid evt_new t",
		"top_r1 acct_p1 - pi_r1 300 300 usd paid evt_r1 t",
		"top_s1 acct_p1 cs_s1 pi_s1 500 500 usd paid evt_s1 t",
	}
	if !slices.Equal(paid, want) {
		t.Errorf("paid:\n  %s\nwant:\n  %s", strings.Join(paid, "\n  "), strings.Join(want, "\n  "))
	}
	var orders []string
	rows, err := pool.Query(ctx, `SELECT concat_ws(' ', id, account_id, coalesce(session_id, '-'), status) FROM topups ORDER BY id`)
	if err == nil {
		orders, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	wantOrders := []string{
		"top_amt acct_p2 cs_amt pending", "top_done acct_p2 cs_done paid", "top_eur acct_eur cs_eur paid",
		"top_new acct_p1 cs_new paid", "top_other acct_p2 cs_other pending", "top_r1 acct_p1 - paid",
		"top_s1 acct_p1 cs_s1 paid",
	}
	if err != nil || !slices.Equal(orders, wantOrders) {
		t.Errorf("orders (%v):\n  %s\nwant:\n  %s", err, strings.Join(orders, "\n  "), strings.Join(wantOrders, "\n  "))
	}

	// A payment that paid top_s1 again, for a new session of the same account and of another: the call
	// fails on topups_payment_intent_key and records nothing, not even the other order of the call.
	for _, account := range []string{"acct_p1", "acct_p2"} {
		paid, err := topupsPay(ctx, pool,
			payOrder{"top_fine_" + account, account, "cs_fine_" + account, "pi_fine_" + account, "evt_fine_" + account, "usd", 10},
			payOrder{"top_reuse_" + account, account, "cs_reuse_" + account, "pi_s1", "evt_reuse_" + account, "usd", 10})
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23505" || !strings.Contains(pgErr.ConstraintName+pgErr.Message, "topups_payment_intent_key") {
			t.Errorf("%s reusing pi_s1: paid %v, %v; want unique_violation on topups_payment_intent_key", account, paid, err)
		}
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM topups WHERE account_id = $1 AND id LIKE 'top_%'||$1`, account).Scan(&n); err != nil || n != 0 {
			t.Errorf("%s: %d orders recorded by the failed call (%v)", account, n, err)
		}
	}
}
