package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

const loadSecret = "whsec_load_test_onceledger_0000000000000"

// workload is a set of signed-at-send-time Stripe events whose final ledger is known in advance,
// whatever order they arrive in and however often.
type workload struct {
	events   [][]byte
	outcomes map[string]string // event id → its stored outcome
	accounts map[string]wantAccount
}

type wantAccount struct {
	balance int64
	entries []string // "kind amount key", sorted
}

// newWorkload builds five events per account (top-ups, partial and failed refunds, disputes won and
// lost, inquiries, payments that are recorded only, types that are ignored), so 200 accounts make 1,000.
func newWorkload(accounts int) *workload {
	w := &workload{outcomes: map[string]string{}, accounts: map[string]wantAccount{}}
	for i := range accounts {
		acct, pi := fmt.Sprintf("acct_load_%d", i), fmt.Sprintf("pi_load_%d", i)
		amount := int64(1000 + 10*i)
		var want wantAccount
		entry := func(kind string, amount int64, key string) {
			want.balance += amount
			want.entries = append(want.entries, kind+" "+strconv.FormatInt(amount, 10)+" "+key)
		}
		add := func(id, eventType, outcome string, object map[string]any) {
			w.events = append(w.events, stripeEvent(id, eventType, object))
			w.outcomes[id] = outcome
		}
		refund := func(id, eventType, refundID string, amount int64, status string) {
			add(id, eventType, "applied", map[string]any{
				"id": refundID, "object": "refund", "amount": amount, "currency": "gbp", "status": status,
				"charge": "ch_" + pi, "payment_intent": pi, "metadata": map[string]any{},
			})
		}
		dispute := func(id, eventType, disputeID string, amount int64, status, caseType, outcome string) {
			add(id, eventType, outcome, map[string]any{
				"id": disputeID, "object": "dispute", "amount": amount, "currency": "gbp", "status": status,
				"charge": "ch_" + pi, "payment_intent": pi, "metadata": map[string]any{},
				"payment_method_details": map[string]any{"type": "card", "card": map[string]any{"case_type": caseType}},
			})
		}
		id := func(what string) string { return fmt.Sprintf("evt_load_%d_%s", i, what) }

		add(id("topup"), "checkout.session.completed", "applied", map[string]any{
			"id": "cs_load_" + strconv.Itoa(i), "object": "checkout.session", "payment_status": "paid",
			"amount_total": amount, "currency": "gbp", "metadata": map[string]any{"account_id": acct}, "payment_intent": pi,
		})
		entry(db.KindTopup, amount, "stripe:"+id("topup"))
		switch i % 5 {
		case 0: // a refund told twice; a refund that failed
			refund(id("re_a_created"), "refund.created", "re_a_"+pi, 100, "succeeded")
			refund(id("re_a_updated"), "refund.updated", "re_a_"+pi, 100, "succeeded")
			refund(id("re_b_created"), "refund.created", "re_b_"+pi, 200, "pending")
			refund(id("re_b_failed"), "refund.failed", "re_b_"+pi, 200, "failed")
			entry(db.KindRefund, -100, "stripe:refund:re_a_"+pi)
			entry(db.KindRefund, -200, "stripe:refund:re_b_"+pi)
			entry(db.KindRefundRestore, 200, "stripe:refund-failed:re_b_"+pi)
		case 1: // a dispute won
			dispute(id("dp_created"), "charge.dispute.created", "dp_"+pi, 500, "needs_response", "chargeback", "applied")
			dispute(id("dp_updated"), "charge.dispute.updated", "dp_"+pi, 500, "under_review", "chargeback", "applied")
			dispute(id("dp_closed"), "charge.dispute.closed", "dp_"+pi, 500, "won", "chargeback", "applied")
			add(id("pi"), "payment_intent.succeeded", "recorded", map[string]any{"id": pi, "object": "payment_intent", "amount": amount, "currency": "gbp"})
			entry(db.KindDispute, -500, "stripe:dispute:dp_"+pi)
			entry(db.KindDisputeWon, 500, "stripe:dispute-won:dp_"+pi)
		case 2: // a dispute lost
			dispute(id("dp_created"), "charge.dispute.created", "dp_"+pi, 400, "needs_response", "chargeback", "applied")
			dispute(id("dp_closed"), "charge.dispute.closed", "dp_"+pi, 400, "lost", "chargeback", "applied")
			add(id("ch"), "charge.succeeded", "recorded", map[string]any{"id": "ch_" + pi, "object": "charge", "amount": amount, "currency": "gbp", "payment_intent": pi})
			add(id("cus"), "customer.created", "ignored", map[string]any{"id": "cus_" + pi, "object": "customer"})
			entry(db.KindDispute, -400, "stripe:dispute:dp_"+pi)
		case 3: // a refund, and an inquiry that moves no money
			refund(id("re_created"), "refund.created", "re_"+pi, 250, "succeeded")
			dispute(id("inquiry"), "charge.dispute.created", "dp_"+pi, 999, "warning_needs_response", "inquiry", "recorded")
			add(id("cus"), "customer.updated", "ignored", map[string]any{"id": "cus_" + pi, "object": "customer"})
			add(id("ch"), "charge.succeeded", "recorded", map[string]any{"id": "ch_" + pi, "object": "charge", "amount": amount, "currency": "gbp", "payment_intent": pi})
			entry(db.KindRefund, -250, "stripe:refund:re_"+pi)
		case 4: // four partial refunds
			for r := range 4 {
				refundID := fmt.Sprintf("re_%d_%s", r, pi)
				refund(id(fmt.Sprintf("re_%d", r)), "refund.created", refundID, 50, "succeeded")
				entry(db.KindRefund, -50, "stripe:refund:"+refundID)
			}
		}
		sort.Strings(want.entries)
		w.accounts[acct] = want
	}
	return w
}

func stripeEvent(id, eventType string, object map[string]any) []byte {
	body, err := json.Marshal(map[string]any{
		"id": id, "object": "event", "api_version": "2024-06-20", "created": time.Now().Unix(), "livemode": false,
		"type": eventType, "data": map[string]any{"object": object},
	})
	if err != nil {
		panic(err)
	}
	return body
}

// createAccounts creates the workload's accounts, before any event arrives.
func (w *workload) createAccounts(t *testing.T, databaseURL string) {
	t.Helper()
	ctx := context.Background()
	pool := openPool(t, databaseURL)
	for acct := range w.accounts {
		if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, acct, "gbp", 0); err != nil {
			t.Fatal(err)
		}
	}
}

// delivery tallies what the senders saw.
type delivery struct {
	delivered atomic.Int64 // events answered 2xx
	answered  atomic.Int64 // attempts that got an HTTP answer, whatever its status

	mu       sync.Mutex
	statuses map[string]int // status code, or "transport error" → attempts
}

func (d *delivery) note(status string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.statuses[status]++
}

// answers copies the counts, for a message written while senders still note theirs.
func (d *delivery) answers() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.statuses)
}

func (d *delivery) count(status string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.statuses[status]
}

// deliverAll sends every event, shuffled, through concurrent Stripe-like senders: each attempt is
// signed anew, and any non-2xx answer or transport error is retried after a short backoff, a bounded
// number of times. It returns once every event was answered 2xx or given up on (a test error).
func (w *workload) deliverAll(t *testing.T, url string, senders int, d *delivery) {
	t.Helper()
	d.statuses = map[string]int{}
	order := rand.Perm(len(w.events))
	client := &http.Client{Timeout: 10 * time.Second}
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := s; i < len(order); i += senders {
				if !send(client, url, w.events[order[i]], d) {
					t.Errorf("event %d was never accepted; answers so far: %v", order[i], d.answers())
					return
				}
			}
		})
	}
	wg.Wait()
}

const maxAttempts = 100

func send(client *http.Client, url string, body []byte, d *delivery) bool {
	backoff := 10 * time.Millisecond
	for range maxAttempts {
		status, err := deliverOnce(client, url, body)
		if err != nil {
			d.note("transport error")
		} else {
			d.answered.Add(1)
			d.note(strconv.Itoa(status))
			if status/100 == 2 {
				d.delivered.Add(1)
				return true
			}
		}
		time.Sleep(backoff + rand.N(backoff))
		backoff = min(2*backoff, 200*time.Millisecond)
	}
	return false
}

// deliverOnce posts body to the webhook, signed now as Stripe does, and returns the status.
func deliverOnce(client *http.Client, url string, body []byte) (int, error) {
	status, _, err := deliverOnceAnswer(client, url, body)
	return status, err
}

// deliverOnceAnswer is deliverOnce that also returns the JSON answer (nil when it is not JSON).
func deliverOnceAnswer(client *http.Client, url string, body []byte) (int, map[string]any, error) {
	signature := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: loadSecret, Timestamp: time.Now()}).Header
	req, err := http.NewRequest(http.MethodPost, url+"/webhooks/stripe", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Stripe-Signature", signature)
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var answer map[string]any
	if json.NewDecoder(resp.Body).Decode(&answer) != nil {
		answer = nil
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, answer, nil
}

// assertLedger checks the money to the entry: every account's balance and entries (kind, amount,
// key), every event recorded once with its outcome and none left parked, then `onceledger verify`.
func (w *workload) assertLedger(t *testing.T, databaseURL string) {
	t.Helper()
	ctx := context.Background()
	pool := openPool(t, databaseURL)
	for acct, want := range w.accounts {
		got, err := db.GetAccount(ctx, pool, acct)
		if err != nil {
			t.Fatal(err)
		}
		entries, err := db.Entries(ctx, pool, acct, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		keys := make([]string, len(entries))
		for i, e := range entries {
			keys[i] = e.Kind + " " + strconv.FormatInt(e.Amount, 10) + " " + e.DedupeKey
		}
		sort.Strings(keys)
		if got.Balance != want.balance || !slices.Equal(keys, want.entries) {
			t.Errorf("%s: balance %d, entries %q; want %d, %q", acct, got.Balance, keys, want.balance, want.entries)
		}
	}

	rows, err := pool.Query(ctx, `SELECT event_id, outcome FROM stripe_events`)
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]string{}
	for rows.Next() {
		var id, outcome string
		if err := rows.Scan(&id, &outcome); err != nil {
			t.Fatal(err)
		}
		recorded[id] = outcome
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(recorded) != len(w.outcomes) {
		t.Errorf("%d events recorded, want %d", len(recorded), len(w.outcomes))
	}
	for id, want := range w.outcomes {
		if recorded[id] != want {
			t.Errorf("event %s recorded as %q, want %q", id, recorded[id], want)
		}
	}

	// --parked-after 0s: any event still parked is a violation.
	stdout := &output{}
	if err := run(ctx, []string{"verify", "--parked-after", "0s"}, getenvFrom(map[string]string{"DATABASE_URL": databaseURL}), stdout, &output{}); err != nil {
		t.Errorf("verify after the load: %v\n%s", err, stdout)
	}
}
