package api_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/onceledger/onceledger/db"
)

func TestWebhookTopupDelivered50TimesConcurrentlyCreditsOnce(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.createAccount("acct_1", "gbp")
	body := topupEvent("evt_topup", "cs_1", "pi_1", "acct_1", 1000)

	const deliveries = 50
	replies := make([]webhookReply, deliveries)
	var wg sync.WaitGroup
	for i := range deliveries {
		wg.Go(func() { replies[i] = s.deliver(body) })
	}
	wg.Wait()

	var credited, duplicates int
	for _, r := range replies {
		if r.Credited {
			credited++
		}
		if r.Duplicate {
			duplicates++
		}
	}
	if credited != 1 || duplicates != deliveries-1 {
		t.Fatalf("credited %d, duplicates %d; want 1 and %d", credited, duplicates, deliveries-1)
	}
	s.wantBalance("acct_1", 1000)
	if n := s.count(`SELECT count(*) FROM ledger`); n != 1 {
		t.Fatalf("%d entries, want 1", n)
	}
}

func TestWebhookResponseBody(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.createAccount("acct_1", "gbp")
	body := topupEvent("evt_body", "cs_1", "pi_1", "acct_1", 1000)

	want := `{"ok":true,"event":"evt_body","duplicate":false,"credited":true,"reversed":0,"restored":0}` + "\n"
	if got := s.deliver(body).raw; got != want {
		t.Fatalf("first delivery answered %s, want %s", got, want)
	}
	want = `{"ok":true,"event":"evt_body","duplicate":true,"credited":false,"reversed":0,"restored":0}` + "\n"
	if got := s.deliver(body).raw; got != want {
		t.Fatalf("redelivery answered %s, want %s", got, want)
	}
	parked := refundEvent("refund.created", "evt_parked", "re_1", "pi_unknown", 100, "succeeded")
	want = `{"ok":true,"event":"evt_parked","duplicate":false,"credited":false,"reversed":0,"restored":0,"parked":"unknown_payment"}` + "\n"
	if got := s.deliver(parked).raw; got != want {
		t.Fatalf("parked delivery answered %s, want %s", got, want)
	}
}

// The seed's case: two £5 refunds of a £10 payment. charge.refunded carries the cumulative
// amount_refunded (500, then 1000); the refunds themselves come from the Stripe API.
func TestWebhookChargeRefundedReversesEachRefundOnce(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.createAccount("acct_1", "gbp")
	s.deliver(topupEvent("evt_topup", "cs_1", "pi_1", "acct_1", 1000))

	first := refundObject("re_a", "ch_pi_1", "pi_1", 500, "succeeded")
	second := refundObject("re_b", "ch_pi_1", "pi_1", 500, "succeeded")
	s.stripe.SetRefunds("ch_pi_1", first)
	if r := s.deliver(chargeRefundedEvent("evt_refunded_1", "pi_1", 1000, 500)); r.Reversed != 1 {
		t.Fatalf("first charge.refunded reversed %d, want 1", r.Reversed)
	}
	s.stripe.SetRefunds("ch_pi_1", first, second)
	if r := s.deliver(chargeRefundedEvent("evt_refunded_2", "pi_1", 1000, 1000)); r.Reversed != 1 {
		t.Fatalf("second charge.refunded reversed %d, want 1 (only the new refund)", r.Reversed)
	}
	s.wantBalance("acct_1", 0)

	// The same refunds announced again as refund objects: nothing more.
	for i, id := range []string{"re_a", "re_b"} {
		r := s.deliver(refundEvent("charge.refund.updated", fmt.Sprintf("evt_refund_updated_%d", i), id, "pi_1", 500, "succeeded"))
		if r.Reversed != 0 || r.Parked != "" {
			t.Fatalf("charge.refund.updated for %s: %+v, want nothing posted", id, r)
		}
	}
	s.wantBalance("acct_1", 0)
	if n := s.count(`SELECT count(*) FROM ledger WHERE kind = 'refund'`); n != 2 {
		t.Fatalf("%d refund entries, want 2", n)
	}
}

func TestWebhookChargeRefundedWithoutRefundList(t *testing.T) {
	t.Parallel()

	t.Run("no API key parks refund_list_unavailable", func(t *testing.T) {
		t.Parallel()
		s := newWebhookServer(t, withoutStripeKey)
		s.createAccount("acct_1", "gbp")
		s.deliver(topupEvent("evt_topup", "cs_1", "pi_1", "acct_1", 1000))
		if r := s.deliver(chargeRefundedEvent("evt_refunded", "pi_1", 1000, 500)); r.Parked != "refund_list_unavailable" {
			t.Fatalf("reply %+v, want parked refund_list_unavailable", r)
		}
		s.wantBalance("acct_1", 1000)
	})

	t.Run("a complete list in the payload needs no API call", func(t *testing.T) {
		t.Parallel()
		s := newWebhookServer(t, withoutStripeKey)
		s.createAccount("acct_1", "gbp")
		s.deliver(topupEvent("evt_topup", "cs_1", "pi_1", "acct_1", 1000))
		charge := obj{
			"id": "ch_pi_1", "object": "charge", "amount": 1000, "amount_refunded": 700, "currency": "gbp",
			"payment_intent": "pi_1", "metadata": obj{},
			"refunds": obj{"object": "list", "has_more": false, "data": []obj{
				refundObject("re_a", "ch_pi_1", "pi_1", 300, "succeeded"),
				refundObject("re_b", "ch_pi_1", "pi_1", 400, "pending"),
			}},
		}
		if r := s.deliver(eventJSON("evt_refunded", "charge.refunded", "2020-08-27", charge)); r.Reversed != 2 {
			t.Fatalf("reply %+v, want the 2 listed refunds reversed", r)
		}
		s.wantBalance("acct_1", 300)
	})

	t.Run("Stripe API down answers 503 and writes nothing", func(t *testing.T) {
		t.Parallel()
		s := newWebhookServer(t)
		s.createAccount("acct_1", "gbp")
		s.deliver(topupEvent("evt_topup", "cs_1", "pi_1", "acct_1", 1000))
		before := s.rowsWritten()
		s.stripe.FailWith(http.StatusInternalServerError)
		body := chargeRefundedEvent("evt_refunded", "pi_1", 1000, 500)
		if r := s.post(body, sign(body, testSecret, time.Now())); r.status != http.StatusServiceUnavailable {
			t.Fatalf("answered %d %s, want 503", r.status, r.raw)
		}
		if got := s.rowsWritten(); got != before {
			t.Fatalf("%d rows written by a failed delivery", got-before)
		}
		s.stripe.FailWith(0)
		s.stripe.SetRefunds("ch_pi_1", refundObject("re_a", "ch_pi_1", "pi_1", 500, "succeeded"))
		if r := s.deliver(body); r.Reversed != 1 {
			t.Fatalf("retry reversed %d, want 1", r.Reversed)
		}
		s.wantBalance("acct_1", 500)

		// Stripe down again: a redelivery of the applied event is still a plain duplicate, since it
		// needs no refund list.
		s.stripe.FailWith(http.StatusInternalServerError)
		if r := s.deliver(body); !r.Duplicate {
			t.Fatalf("redelivery while Stripe is down answered %+v, want duplicate", r)
		}
		s.wantBalance("acct_1", 500)
	})
}

func TestWebhookFailedRefundNetsZero(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		events func() [][]byte
	}{
		{"succeeded then failed", func() [][]byte {
			return [][]byte{
				refundEvent("refund.created", "evt_created", "re_1", "pi_1", 400, "succeeded"),
				refundEvent("refund.failed", "evt_failed", "re_1", "pi_1", 400, "failed"),
			}
		}},
		{"failed delivered before created", func() [][]byte {
			return [][]byte{
				refundEvent("refund.failed", "evt_failed", "re_1", "pi_1", 400, "failed"),
				refundEvent("refund.created", "evt_created", "re_1", "pi_1", 400, "succeeded"),
			}
		}},
		{"canceled", func() [][]byte {
			return [][]byte{
				refundEvent("charge.refund.updated", "evt_pending", "re_1", "pi_1", 400, "pending"),
				refundEvent("refund.updated", "evt_canceled", "re_1", "pi_1", 400, "canceled"),
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newWebhookServer(t)
			s.createAccount("acct_1", "gbp")
			s.deliver(topupEvent("evt_topup", "cs_1", "pi_1", "acct_1", 1000))
			for _, e := range tt.events() {
				s.deliver(e)
			}
			s.wantBalance("acct_1", 1000)
			want := []string{
				"refund -400 stripe:refund:re_1 pi_1",
				"refund_restore 400 stripe:refund-failed:re_1 pi_1",
				"topup 1000 stripe:evt_topup pi_1",
			}
			if got := s.entries("acct_1"); !slices.Equal(got, want) {
				t.Fatalf("entries %q, want %q", got, want)
			}
		})
	}
}

func TestWebhookDisputes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		events  [][]byte
		balance int64
		kinds   []string // entry kinds besides the top-up, sorted
	}{
		{
			name: "chargeback created then won nets zero",
			events: [][]byte{
				disputeEvent("charge.dispute.created", "evt_d1", "du_1", "pi_1", 1000, "needs_response", "chargeback"),
				disputeEvent("charge.dispute.closed", "evt_d2", "du_1", "pi_1", 1000, "won", "chargeback"),
			},
			balance: 1000, kinds: []string{"dispute", "dispute_won"},
		},
		{
			name: "chargeback closed lost reverses once",
			events: [][]byte{
				disputeEvent("charge.dispute.created", "evt_d1", "du_1", "pi_1", 1000, "needs_response", "chargeback"),
				disputeEvent("charge.dispute.updated", "evt_d2", "du_1", "pi_1", 1000, "under_review", "chargeback"),
				disputeEvent("charge.dispute.closed", "evt_d3", "du_1", "pi_1", 1000, "lost", "chargeback"),
			},
			balance: 0, kinds: []string{"dispute"},
		},
		{
			name: "inquiry created and warning_closed posts nothing",
			events: [][]byte{
				disputeEvent("charge.dispute.created", "evt_d1", "du_1", "pi_1", 1000, "warning_needs_response", "inquiry"),
				disputeEvent("charge.dispute.updated", "evt_d2", "du_1", "pi_1", 1000, "needs_response", "inquiry"),
				disputeEvent("charge.dispute.closed", "evt_d3", "du_1", "pi_1", 1000, "warning_closed", "inquiry"),
			},
			balance: 1000, kinds: nil,
		},
		{
			name: "funds_withdrawn after created reverses once",
			events: [][]byte{
				disputeEvent("charge.dispute.created", "evt_d1", "du_1", "pi_1", 1000, "needs_response", "chargeback"),
				disputeEvent("charge.dispute.funds_withdrawn", "evt_d2", "du_1", "pi_1", 1000, "needs_response", "chargeback"),
			},
			balance: 0, kinds: []string{"dispute"},
		},
		{
			name: "funds_reinstated before anything else nets zero",
			events: [][]byte{
				disputeEvent("charge.dispute.funds_reinstated", "evt_d1", "du_1", "pi_1", 1000, "won", "chargeback"),
				disputeEvent("charge.dispute.created", "evt_d2", "du_1", "pi_1", 1000, "needs_response", "chargeback"),
			},
			balance: 1000, kinds: []string{"dispute", "dispute_won"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newWebhookServer(t)
			s.createAccount("acct_1", "gbp")
			s.deliver(topupEvent("evt_topup", "cs_1", "pi_1", "acct_1", 1000))
			for _, e := range tt.events {
				s.deliver(e)
			}
			s.wantBalance("acct_1", tt.balance)
			var kinds []string
			for _, e := range s.entries("acct_1") {
				if kind := strings.Fields(e)[0]; kind != "topup" {
					kinds = append(kinds, kind)
				}
			}
			if !slices.Equal(kinds, tt.kinds) {
				t.Fatalf("entries %q, want kinds %q besides the top-up", s.entries("acct_1"), tt.kinds)
			}
		})
	}
}

func TestWebhookRefundBeforeTopupIsParkedThenApplied(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.createAccount("acct_1", "gbp")

	refund := s.deliver(refundEvent("refund.created", "evt_refund", "re_1", "pi_1", 300, "succeeded"))
	if refund.Parked != "unknown_payment" {
		t.Fatalf("early refund answered %+v, want parked unknown_payment", refund)
	}
	dispute := s.deliver(disputeEvent("charge.dispute.created", "evt_dispute", "du_1", "pi_1", 200, "needs_response", "chargeback"))
	if dispute.Parked != "unknown_payment" {
		t.Fatalf("early dispute answered %+v, want parked unknown_payment", dispute)
	}
	s.wantBalance("acct_1", 0)

	topup := s.deliver(topupEvent("evt_topup", "cs_1", "pi_1", "acct_1", 1000))
	if !topup.Credited || topup.Reversed != 2 {
		t.Fatalf("top-up answered %+v, want credited and the 2 parked reversals applied", topup)
	}
	s.wantBalance("acct_1", 500)
	for _, id := range []string{"evt_refund", "evt_dispute"} {
		if outcome, reason := s.eventOutcome(id); outcome != "applied" || reason != "" {
			t.Fatalf("%s is %s %s after its payment arrived, want applied", id, outcome, reason)
		}
	}
	// Redelivery of the parked event, now applied, posts nothing.
	if r := s.deliver(refundEvent("refund.created", "evt_refund", "re_1", "pi_1", 300, "succeeded")); !r.Duplicate {
		t.Fatalf("redelivery answered %+v, want duplicate", r)
	}
	s.wantBalance("acct_1", 500)
}

// One payment: a top-up, two partial refunds (one of them announced by charge.refunded, whose refunds
// come from the Stripe API), a failed refund and a won dispute. Every order of delivery, with
// duplicates, must end in the same ledger. Each permutation has its own account and payment.
func TestWebhookOrderIndependence(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)

	events := func(i int) [][]byte {
		pi := fmt.Sprintf("pi_%d", i)
		ev := func(name string) string { return fmt.Sprintf("evt_%d_%s", i, name) }
		return [][]byte{
			topupEvent(ev("topup"), "cs_"+pi, pi, fmt.Sprintf("acct_%d", i), 10000),
			refundEvent("charge.refund.updated", ev("refund_a"), "re_a_"+pi, pi, 2000, "succeeded"),
			chargeRefundedEvent(ev("refunded"), pi, 10000, 5000),
			refundEvent("refund.failed", ev("refund_c"), "re_c_"+pi, pi, 1000, "failed"),
			disputeEvent("charge.dispute.closed", ev("dispute"), "du_"+pi, pi, 4000, "won", "chargeback"),
		}
	}
	want := func(i int) []string {
		pi := fmt.Sprintf("pi_%d", i)
		return []string{
			"dispute -4000 stripe:dispute:du_" + pi + " " + pi,
			"dispute_won 4000 stripe:dispute-won:du_" + pi + " " + pi,
			"refund -1000 stripe:refund:re_c_" + pi + " " + pi,
			"refund -2000 stripe:refund:re_a_" + pi + " " + pi,
			"refund -3000 stripe:refund:re_b_" + pi + " " + pi,
			"refund_restore 1000 stripe:refund-failed:re_c_" + pi + " " + pi,
			fmt.Sprintf("topup 10000 stripe:evt_%d_topup %s", i, pi),
		}
	}

	perms := permutations([]int{0, 1, 2, 3, 4})
	for i := range perms {
		pi := fmt.Sprintf("pi_%d", i)
		s.createAccount(fmt.Sprintf("acct_%d", i), "gbp")
		s.stripe.SetRefunds("ch_"+pi,
			refundObject("re_a_"+pi, "ch_"+pi, pi, 2000, "succeeded"),
			refundObject("re_b_"+pi, "ch_"+pi, pi, 3000, "succeeded"),
			refundObject("re_c_"+pi, "ch_"+pi, pi, 1000, "failed"),
		)
	}

	work := make(chan int)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range work {
				evs := events(i)
				for j, k := range perms[i] {
					s.deliver(evs[k])
					if (i+j)%3 == 0 {
						s.deliver(evs[perms[i][(i*j)%(j+1)]]) // an event already delivered, again
					}
				}
			}
		})
	}
	for i := range perms {
		work <- i
	}
	close(work)
	wg.Wait()

	for i, p := range perms {
		account := fmt.Sprintf("acct_%d", i)
		if got := s.entries(account); !slices.Equal(got, want(i)) {
			t.Errorf("order %v: entries %q, want %q", p, got, want(i))
		}
		s.wantBalance(account, 5000)
	}
	// Balances match their entries, and no payment was reversed beyond its credit.
	violations, err := db.Verify(context.Background(), s.pool, time.Now(), time.Hour, time.Hour)
	if err != nil || len(violations) > 0 {
		t.Fatalf("verify: %v %v", violations, err)
	}
}

func permutations(items []int) [][]int {
	if len(items) <= 1 {
		return [][]int{slices.Clone(items)}
	}
	var out [][]int
	for i, first := range items {
		rest := slices.Concat(items[:i:i], items[i+1:])
		for _, p := range permutations(rest) {
			out = append(out, append([]int{first}, p...))
		}
	}
	return out
}

func TestWebhookAcceptsAnyAPIVersion(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.createAccount("acct_1", "gbp")
	for i, version := range []string{"2024-06-20", "2025-04-30.basil", "2026-01-28.clover"} {
		session := sessionObject(fmt.Sprintf("cs_%d", i), fmt.Sprintf("pi_%d", i), "acct_1", 100)
		r := s.deliver(eventJSON(fmt.Sprintf("evt_%d", i), "checkout.session.completed", version, session))
		if !r.Credited {
			t.Fatalf("event at %s: %+v, want credited", version, r)
		}
	}
	s.wantBalance("acct_1", 300)
}

func TestWebhookRejectsUnverifiedDeliveries(t *testing.T) {
	t.Parallel()
	body := topupEvent("evt_topup", "cs_1", "pi_1", "acct_1", 1000)
	huge := append(bytes.Repeat([]byte(" "), 2<<20), body...)
	// Signed when the subtest runs, not when the table is built: parallel subtests may wait minutes for
	// their turn, which would make every signature stale.
	signed := func(b []byte, secret string, age time.Duration) func() string {
		return func() string { return sign(b, secret, time.Now().Add(-age)) }
	}
	header := func(h string) func() string { return func() string { return h } }
	tests := []struct {
		name      string
		body      []byte
		signature func() string
		status    int
		code      string
	}{
		{"tampered body", bytes.Replace(body, []byte("1000"), []byte("9000"), 1), signed(body, testSecret, 0), 400, "invalid_signature"},
		{"wrong secret", body, signed(body, "whsec_someone_else", 0), 400, "invalid_signature"},
		{"garbled header", body, header("t=abc,v1=zz"), 400, "invalid_signature"},
		{"stale timestamp", body, signed(body, testSecret, 301*time.Second), 400, "stale_signature"},
		{"missing header", body, header(""), 400, "missing_signature"},
		{"malformed JSON", []byte(`{"id":"evt_1",`), signed([]byte(`{"id":"evt_1",`), testSecret, 0), 400, "invalid_json"},
		{"JSON but not an event", []byte(`{"hello":"world"}`), signed([]byte(`{"hello":"world"}`), testSecret, 0), 400, "invalid_event"},
		{"2 MiB body", huge, signed(huge, testSecret, 0), 413, "body_too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newWebhookServer(t)
			s.createAccount("acct_1", "gbp")
			r := s.post(tt.body, tt.signature())
			if r.status != tt.status || r.OK || r.Error.Code != tt.code {
				t.Fatalf("answered %d %s, want %d %s", r.status, r.raw, tt.status, tt.code)
			}
			if n := s.rowsWritten(); n != 0 {
				t.Fatalf("%d rows written by a rejected delivery", n)
			}
		})
	}
}

func TestWebhookWithoutSecretIsNotConfigured(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t, withSecrets())
	body := topupEvent("evt_topup", "cs_1", "pi_1", "acct_1", 1000)
	if r := s.post(body, sign(body, testSecret, time.Now())); r.status != http.StatusServiceUnavailable || r.Error.Code != "webhook_not_configured" {
		t.Fatalf("answered %d %s, want 503 webhook_not_configured", r.status, r.raw)
	}
}

func TestWebhookAcceptsEverySecretDuringRotation(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t, withSecrets("whsec_old", "whsec_new"))
	s.createAccount("acct_1", "gbp")
	for i, secret := range []string{"whsec_old", "whsec_new"} {
		body := topupEvent(fmt.Sprintf("evt_%d", i), fmt.Sprintf("cs_%d", i), fmt.Sprintf("pi_%d", i), "acct_1", 100)
		if r := s.post(body, sign(body, secret, time.Now())); r.status != http.StatusOK || !r.Credited {
			t.Fatalf("signed with %s: %d %s", secret, r.status, r.raw)
		}
	}
	body := topupEvent("evt_x", "cs_x", "pi_x", "acct_1", 100)
	if r := s.post(body, sign(body, testSecret, time.Now())); r.status != http.StatusBadRequest {
		t.Fatalf("signed with a retired secret: %d %s, want 400", r.status, r.raw)
	}
	s.wantBalance("acct_1", 200)
}

// The database connection dies while the delivery is blocked mid-transaction (after the event and the
// order were inserted, on the account row its entry's insert locks): 503, nothing left behind, and the
// redelivery applies it once.
func TestWebhookDatabaseKilledMidRequest(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.createAccount("acct_1", "gbp")
	ctx := context.Background()
	body := topupEvent("evt_topup", "cs_1", "pi_1", "acct_1", 1000)

	holder, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	// NO KEY UPDATE lets the foreign-key checks through and stops the entry's insert, which locks the
	// account row first.
	if _, err := holder.Exec(ctx, `SELECT 1 FROM accounts WHERE id = 'acct_1' FOR NO KEY UPDATE`); err != nil {
		t.Fatal(err)
	}

	replied := make(chan webhookReply, 1)
	go func() { replied <- s.post(body, sign(body, testSecret, time.Now())) }()

	// The delivery may wait on the row twice: within its group's lock timeout, then in a transaction of
	// its own, on another connection. Whichever connection waits is killed, until the delivery answers.
	var r webhookReply
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		select {
		case r = <-replied:
		default:
			if time.Now().After(deadline) {
				t.Fatal("the delivery never answered: it did not block on the account row, or was not killed")
			}
			if _, err := s.pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%ledger_append%'`); err != nil {
				t.Fatal(err)
			}
			continue
		}
		break
	}
	if r.status != http.StatusServiceUnavailable {
		t.Fatalf("answered %d %s, want 503", r.status, r.raw)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.rowsWritten(); n != 0 {
		t.Fatalf("%d rows left by the killed delivery", n)
	}

	if r := s.deliver(body); !r.Credited {
		t.Fatalf("redelivery answered %+v, want credited", r)
	}
	if r := s.deliver(body); !r.Duplicate {
		t.Fatalf("second redelivery answered %+v, want duplicate", r)
	}
	s.wantBalance("acct_1", 1000)
}

// A top-up created as the API will (pending order, then its Checkout Session) is paid by the session's
// completion and credited once; another completion event for the same session credits nothing.
func TestWebhookPaysPendingTopupOnce(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.createAccount("acct_1", "gbp")
	ctx := context.Background()
	if _, _, err := db.InsertPendingTopup(ctx, s.pool, db.Topup{ID: "top_1", AccountID: "acct_1", Amount: 1500, Currency: "gbp"}); err != nil {
		t.Fatal(err)
	}
	session, url := "cs_api_1", "https://checkout.stripe.com/c/pay/cs_api_1"
	if _, err := db.SetTopupSession(ctx, s.pool, "top_1", session, url); err != nil {
		t.Fatal(err)
	}

	if r := s.deliver(topupEvent("evt_completed", session, "pi_1", "acct_1", 1500)); !r.Credited {
		t.Fatalf("completion answered %+v, want credited", r)
	}
	if r := s.deliver(eventJSON("evt_async", "checkout.session.async_payment_succeeded", apiVersion, sessionObject(session, "pi_1", "acct_1", 1500))); r.Credited {
		t.Fatalf("a second completion event credited again: %+v", r)
	}
	order, err := db.GetTopup(ctx, s.pool, "top_1")
	if err != nil {
		t.Fatal(err)
	}
	if order.Status != "paid" || order.PaymentIntent != "pi_1" || order.PaidEventID != "evt_completed" {
		t.Fatalf("order %+v, want paid by evt_completed with pi_1", order)
	}
	s.wantBalance("acct_1", 1500)
	if n := s.count(`SELECT count(*) FROM topups`); n != 1 {
		t.Fatalf("%d orders, want the API's one", n)
	}
}

func TestWebhookParksWhatItCannotApply(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		setup  func(s *webhookServer)
		event  []byte
		reason string
	}{
		{
			name: "key reused with another amount",
			setup: func(s *webhookServer) {
				s.deliver(refundEvent("refund.created", "evt_first", "re_1", "pi_1", 300, "succeeded"))
			},
			event:  refundEvent("refund.updated", "evt_conflict", "re_1", "pi_1", 700, "succeeded"),
			reason: "dedupe_conflict",
		},
		{
			name:   "payment that already paid another order",
			event:  topupEvent("evt_second_order", "cs_other", "pi_1", "acct_1", 1000),
			reason: "dedupe_conflict",
		},
		{
			// On Citus the two accounts' orders are on different shards: the payment is claimed across them.
			name:   "payment that already paid another account's order",
			setup:  func(s *webhookServer) { s.createAccount("acct_2", "gbp") },
			event:  topupEvent("evt_other_account", "cs_other", "pi_1", "acct_2", 1000),
			reason: "dedupe_conflict",
		},
		{
			name:   "session for an account that does not exist",
			event:  topupEvent("evt_nobody", "cs_2", "pi_2", "acct_missing", 500),
			reason: "unknown_account",
		},
		{
			name:   "session in another currency",
			event:  eventJSON("evt_usd", "checkout.session.completed", apiVersion, withField(sessionObject("cs_2", "pi_2", "acct_1", 500), "currency", "usd")),
			reason: "currency_mismatch",
		},
		{
			name:   "refund in another currency",
			event:  eventJSON("evt_usd", "refund.created", apiVersion, withField(refundObject("re_2", "ch_pi_1", "pi_1", 100, "succeeded"), "currency", "usd")),
			reason: "currency_mismatch",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newWebhookServer(t)
			s.createAccount("acct_1", "gbp")
			s.deliver(topupEvent("evt_topup", "cs_1", "pi_1", "acct_1", 1000))
			if tt.setup != nil {
				tt.setup(s)
			}
			before := s.balance("acct_1")
			entries := s.count(`SELECT count(*) FROM ledger`)
			r := s.deliver(tt.event)
			if r.Parked != tt.reason || r.Credited || r.Reversed != 0 {
				t.Fatalf("answered %+v, want parked %s and nothing posted", r, tt.reason)
			}
			s.wantBalance("acct_1", before)
			if n := s.count(`SELECT count(*) FROM ledger`); n != entries {
				t.Fatalf("%d entries posted by a parked event", n-entries)
			}
			if outcome, reason := s.eventOutcome(r.Event); outcome != "parked" || reason != tt.reason {
				t.Fatalf("stored as %s %s", outcome, reason)
			}
		})
	}
}

func withField(o obj, key string, value any) obj {
	o[key] = value
	return o
}

func TestWebhookRecordsWhatIsNotCredited(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.createAccount("acct_1", "gbp")
	tests := []struct {
		event   []byte
		outcome string
	}{
		{eventJSON("evt_pi", "payment_intent.succeeded", apiVersion, obj{"id": "pi_1", "object": "payment_intent", "amount": 1000, "currency": "gbp", "status": "succeeded", "metadata": obj{"account_id": "acct_1"}}), "recorded"},
		{eventJSON("evt_ch", "charge.succeeded", apiVersion, obj{"id": "ch_1", "object": "charge", "amount": 1000, "currency": "gbp", "payment_intent": "pi_1", "metadata": obj{"account_id": "acct_1"}}), "recorded"},
		{eventJSON("evt_unpaid", "checkout.session.completed", apiVersion, withField(sessionObject("cs_1", "pi_1", "acct_1", 1000), "payment_status", "unpaid")), "recorded"},
		{eventJSON("evt_customer", "customer.created", apiVersion, obj{"id": "cus_1", "object": "customer"}), "ignored"},
	}
	for _, tt := range tests {
		r := s.deliver(tt.event)
		if r.Credited || r.Parked != "" {
			t.Fatalf("%s answered %+v, want nothing credited", r.Event, r)
		}
		if outcome, _ := s.eventOutcome(r.Event); outcome != tt.outcome {
			t.Fatalf("%s stored as %s, want %s", r.Event, outcome, tt.outcome)
		}
	}
	s.wantBalance("acct_1", 0)
}

// A Checkout Session is one order's: delivered again naming another account (whose orders, on Citus, are
// on another shard), it records no second order and credits nothing.
func TestWebhookSessionOfAnotherAccountsOrderCreditsNothing(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.createAccount("acct_1", "gbp")
	s.createAccount("acct_2", "gbp")
	s.deliver(topupEvent("evt_topup", "cs_1", "pi_1", "acct_1", 1000))
	r := s.deliver(topupEvent("evt_same_session", "cs_1", "pi_other", "acct_2", 1000))
	if r.Credited || r.Parked != "" {
		t.Fatalf("answered %+v, want nothing credited", r)
	}
	if outcome, _ := s.eventOutcome(r.Event); outcome != "applied" {
		t.Fatalf("stored as %s, want applied", outcome)
	}
	s.wantBalance("acct_1", 1000)
	s.wantBalance("acct_2", 0)
	if n := s.count(`SELECT count(*) FROM topups WHERE session_id = 'cs_1'`); n != 1 {
		t.Fatalf("%d orders of the session, want 1", n)
	}
}

// A refund racing its own top-up either sees the paid order or is parked before the top-up looks for
// parked events (both lock the payment first): never left parked with its payment known.
func TestWebhookRefundRacingItsTopupIsNeverLeftParked(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	const payments = 30
	var wg sync.WaitGroup
	for i := range payments {
		account, pi := fmt.Sprintf("acct_%d", i), fmt.Sprintf("pi_%d", i)
		s.createAccount(account, "gbp")
		wg.Go(func() { s.deliver(topupEvent("evt_topup_"+pi, "cs_"+pi, pi, account, 1000)) })
		wg.Go(func() { s.deliver(refundEvent("refund.created", "evt_refund_"+pi, "re_"+pi, pi, 300, "succeeded")) })
	}
	wg.Wait()
	for i := range payments {
		s.wantBalance(fmt.Sprintf("acct_%d", i), 700)
	}
	if n := s.count(`SELECT count(*) FROM stripe_events WHERE outcome = 'parked'`); n != 0 {
		t.Fatalf("%d events left parked although their payments were recorded", n)
	}
}

// Every delivery is counted by type, outcome and reason; postings by kind and result.
func TestWebhookMetricsCountEveryDelivery(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t, withoutStripeKey)
	s.createAccount("acct_1", "gbp")
	topup := topupEvent("evt_topup", "cs_1", "pi_1", "acct_1", 1000)
	s.deliver(topup)
	s.deliver(topup)
	s.deliver(refundEvent("refund.created", "evt_r1", "re_1", "pi_1", 300, "succeeded"))
	s.deliver(refundEvent("refund.updated", "evt_r2", "re_1", "pi_1", 400, "succeeded")) // key reused
	s.deliver(chargeRefundedEvent("evt_cr", "pi_1", 1000, 300))                          // no key, no list
	s.deliver(eventJSON("evt_other", "customer.created", apiVersion, obj{"id": "cus_1", "object": "customer"}))
	if r := s.post(topup, sign(topup, "whsec_wrong", time.Now())); r.status != http.StatusBadRequest {
		t.Fatalf("wrong secret answered %d", r.status)
	}

	deliveries := s.metrics.WebhookDeliveries
	want := []struct {
		labels []string
		n      float64
	}{
		{[]string{"checkout.session.completed", "credited", ""}, 1},
		{[]string{"checkout.session.completed", "duplicate", ""}, 1},
		{[]string{"refund.created", "applied", ""}, 1},
		{[]string{"refund.updated", "parked", "dedupe_conflict"}, 1},
		{[]string{"charge.refunded", "parked", "refund_list_unavailable"}, 1},
		{[]string{"other", "ignored", ""}, 1}, // a type the service does not handle: no label of its own
		{[]string{"unverified", "rejected", "invalid_signature"}, 1},
	}
	for _, w := range want {
		if got := testutil.ToFloat64(deliveries.WithLabelValues(w.labels...)); got != w.n {
			t.Errorf("webhook deliveries %v = %v, want %v", w.labels, got, w.n)
		}
	}
	if got := testutil.ToFloat64(s.metrics.Postings.WithLabelValues("refund", "conflict")); got != 1 {
		t.Errorf("refund conflicts = %v, want 1", got)
	}
	if got := testutil.ToFloat64(s.metrics.Postings.WithLabelValues("topup", "posted")); got != 1 {
		t.Errorf("topups posted = %v, want 1", got)
	}
}
