package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/stripefake"
)

const (
	webhookSecret = "whsec_onceledger_bench_local_only_000000"
	apiKey        = "onceledger_bench_key_local_only_00"
	topupAmount   = 1000
)

func accountID(i int) string { return fmt.Sprintf("bench_%05d", i) }

// topupEvent is a checkout.session.completed event paying a top-up of account n, with the fields
// SPEC §4 reads (the rest of a real session is left out: the webhook reads only stable fields).
type topupEvent struct {
	id, session, paymentIntent, account string
	payload                             []byte
}

func newTopupEvent(run string, i, accounts int) topupEvent {
	e := topupEvent{
		id:            "evt_bench_" + run + "_" + strconv.Itoa(i),
		session:       "cs_bench_" + run + "_" + strconv.Itoa(i),
		paymentIntent: "pi_bench_" + run + "_" + strconv.Itoa(i),
		account:       accountID(i % accounts),
	}
	e.payload = stripefake.Event(e.id, "checkout.session.completed", "2024-06-20", map[string]any{
		"id": e.session, "object": "checkout.session", "mode": "payment", "status": "complete",
		"payment_status": "paid", "amount_total": topupAmount, "amount_subtotal": topupAmount, "currency": "usd",
		"payment_intent": e.paymentIntent, "client_reference_id": nil,
		"metadata": map[string]string{"account_id": e.account},
	})
	return e
}

// client talks to the server over loopback HTTP: the workloads' requests on connections of its own
// (conns), a statement's long stream through net/http.
type client struct {
	http  *http.Client
	base  string
	conns *conns
}

func newClient(base string) *client {
	host := strings.TrimPrefix(base, "http://")
	return &client{base: base, conns: &conns{addr: host, host: host}, http: &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute},
	}}
}

// deliver sends the event as Stripe does: signed, to the webhook.
func (c *client) deliver(ctx context.Context, e topupEvent) error {
	header := []string{"Content-Type", "application/json", "Stripe-Signature", stripefake.Sign(e.payload, webhookSecret, time.Now())}
	return c.conns.do(ctx, http.MethodPost, "/webhooks/stripe", header, string(e.payload), http.StatusOK)
}

// adjust credits the account through the API, each call with its own idempotency key.
func (c *client) adjust(ctx context.Context, account, key string) error {
	header := []string{"Content-Type", "application/json", "Authorization", "Bearer " + apiKey, "Idempotency-Key", key}
	return c.conns.do(ctx, http.MethodPost, "/v1/accounts/"+account+"/adjustments", header,
		`{"amount":1,"description":"bench"}`, http.StatusCreated)
}

// authorise authorises a hold of 1 through the API under hold id.
func (c *client) authorise(ctx context.Context, account string, hold db.HoldRequest) error {
	header := []string{"Content-Type", "application/json", "Authorization", "Bearer " + apiKey}
	body := `{"id":"` + hold.ID + `","amount":1,"expires_in":"1h"`
	if hold.Subject != "" {
		body += `,"subject":"` + hold.Subject + `"`
	}
	if hold.Feature != "" {
		body += `,"feature":"` + hold.Feature + `"`
	}
	return c.conns.do(ctx, http.MethodPost, "/v1/accounts/"+account+"/holds", header, body+"}", http.StatusCreated)
}

// applyTopupDirect is the webhook's work for a paid Checkout Session without HTTP, JSON decoding or
// signature: the event row, the order's pending→paid transition and the credit, in one transaction.
// A duplicate stops at the event's primary key, as the webhook does. It is a fixed reference, one
// statement per step (BEGIN, four statements, COMMIT: six round trips), as the webhook's own path
// used to be: the server is measured against it, not against its own current statements.
func applyTopupDirect(ctx context.Context, ledger *db.Ledger, e topupEvent) error {
	return db.InTx(ctx, ledger.Pool(), func(tx db.Tx) error {
		duplicate, err := db.RecordEvent(ctx, tx, db.Event{
			ID: e.id, Type: "checkout.session.completed", APIVersion: "2024-06-20", Created: time.Now(),
			Payload: e.payload, Outcome: "applied",
		})
		if err != nil || duplicate {
			return err
		}
		// The order recorded pending, then made paid: the two statements the webhook used to run.
		if _, err := tx.Exec(ctx, `INSERT INTO topups (id, account_id, session_id, amount, currency)
		                           VALUES ($1, $2, $3, $4, 'usd') ON CONFLICT ON CONSTRAINT topups_session_id_key DO NOTHING`,
			"top_"+e.session, e.account, e.session, topupAmount); err != nil {
			return err
		}
		var account string
		var amount int64
		err = tx.QueryRow(ctx, `UPDATE topups SET status = 'paid', payment_intent = $2, paid_event_id = $3, paid_at = now()
		                        WHERE account_id = $4 AND session_id = $1 AND status = 'pending' RETURNING account_id, amount`,
			e.session, e.paymentIntent, e.id, e.account).Scan(&account, &amount)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		_, err = ledger.Post(ctx, tx, db.Posting{
			AccountID: account, Kind: db.KindTopup, Amount: amount, Description: "Stripe Checkout top-up",
			DedupeKey: "stripe:" + e.id, PaymentIntent: e.paymentIntent,
		})
		return err
	})
}

// pair runs deliver twice at once, as Stripe does when it retries while the first attempt is still in
// flight, and returns both latencies.
func pair(deliver func() error) ([]time.Duration, error) {
	var (
		wg   sync.WaitGroup
		lats [2]time.Duration
		errs [2]error
	)
	for k := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			errs[k] = deliver()
			lats[k] = time.Since(start)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return lats[:], nil
}

// postOneTx is one posting in one transaction: what every posting costs without group commit.
func postOneTx(ctx context.Context, ledger *db.Ledger, p db.Posting) error {
	return db.InTx(ctx, ledger.Pool(), func(tx db.Tx) error {
		_, err := ledger.Post(ctx, tx, p)
		return err
	})
}

// hotAdjustment is the posting the API makes for a credit of 1 under idempotency key i.
func hotAdjustment(account string, i int) db.Posting {
	return db.Posting{
		AccountID: account, Kind: db.KindAdjustment, Amount: 1, Description: "bench",
		DedupeKey: "api:" + account + ":" + strconv.Itoa(i), NoOverdraw: true,
	}
}

// hotAccounts are the accounts of the hot-postings workloads, one per workload and concurrency: a
// row updated once per posting piles up dead versions that every later posting on it walks through
// until vacuum, so no workload starts on a row another one churned.
var hotAccounts = []string{
	"bench_hot_pooled_32", "bench_hot_tx_32", "bench_hot_group_32", "bench_hot_api_32",
	"bench_hot_pooled_64", "bench_hot_tx_64", "bench_hot_group_64", "bench_hot_api_64",
	"bench_hot_notifications_off", "bench_hot_notifications_on", "bench_hot_tracing_off", "bench_hot_tracing_on",
}
