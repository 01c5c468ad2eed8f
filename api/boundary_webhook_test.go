package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/onceledger/onceledger/db"
)

// TestWebhookParksAmountsOutOfRange: an amount above 10^15 is parked amount_out_of_range, as the API
// refuses it, and so is a credit that would carry a balance beyond a bigint — a 200 Stripe stops
// retrying, never a 500 it retries for days — and the account still takes the credits that fit.
func TestWebhookParksAmountsOutOfRange(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.createAccount("acct_1", "gbp")
	s.createAccount("acct_max", "gbp")

	for id, amount := range map[string]int64{"huge": db.MaxAmount + 1, "max": math.MaxInt64} {
		r := s.deliver(topupEvent("evt_topup_"+id, "cs_"+id, "pi_"+id, "acct_1", amount))
		if r.Parked != "amount_out_of_range" || r.Credited {
			t.Fatalf("top-up of %d answered %+v, want parked amount_out_of_range", amount, r)
		}
	}
	s.deliver(topupEvent("evt_topup_ok", "cs_ok", "pi_ok", "acct_1", db.MaxAmount))
	if r := s.deliver(refundEvent("refund.created", "evt_refund_huge", "re_huge", "pi_ok", db.MaxAmount+1, "succeeded")); r.Parked != "amount_out_of_range" {
		t.Fatalf("refund above 10^15 answered %+v, want parked amount_out_of_range", r)
	}
	s.wantBalance("acct_1", db.MaxAmount)

	// A balance already near the top (written straight to the ledger): the credit's own balance
	// update overflows, and the event parks instead of failing.
	err := db.InTx(context.Background(), s.pool, func(tx pgx.Tx) error {
		_, err := new(db.Ledger).Post(context.Background(), tx, db.Posting{AccountID: "acct_max", Kind: db.KindTopup, Amount: math.MaxInt64 - 5, DedupeKey: "stripe:evt_seed_max"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := s.deliver(topupEvent("evt_topup_over", "cs_over", "pi_over", "acct_max", 10)); r.Parked != "amount_out_of_range" {
		t.Fatalf("a credit beyond a bigint answered %+v, want parked amount_out_of_range", r)
	}
	s.deliver(topupEvent("evt_topup_fits", "cs_fits", "pi_fits", "acct_max", 5))
	s.wantBalance("acct_max", math.MaxInt64)
	if n := s.count(`SELECT count(*) FROM stripe_events WHERE parked_reason = 'amount_out_of_range'`); n != 4 {
		t.Fatalf("%d events parked amount_out_of_range, want 4", n)
	}
}

// TestWebhookRefusesHostileSignedEvents: signed events carrying ids longer than 255 characters (which
// no index row holds) or a created time outside 2000–2100 are 400 invalid_event, and nothing is
// written.
func TestWebhookRefusesHostileSignedEvents(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.createAccount("acct_1", "gbp")
	long := "x_" + strings.Repeat("a", 10_000)
	withCreated := func(created int64) []byte {
		var ev map[string]any
		if err := json.Unmarshal(topupEvent("evt_created", "cs_c", "pi_c", "acct_1", 100), &ev); err != nil {
			t.Fatal(err)
		}
		ev["created"] = created
		body, _ := json.Marshal(ev)
		return body
	}
	bodies := map[string][]byte{
		"long event id":            topupEvent("evt_"+long, "cs_1", "pi_1", "acct_1", 100),
		"long session id":          topupEvent("evt_1", long, "pi_1", "acct_1", 100),
		"long payment_intent":      topupEvent("evt_1", "cs_1", long, "acct_1", 100),
		"long refund id":           refundEvent("refund.created", "evt_1", long, "pi_1", 100, "succeeded"),
		"long dispute id":          disputeEvent("charge.dispute.created", "evt_1", long, "pi_1", 100, "needs_response", ""),
		"long event type":          eventJSON("evt_1", long, apiVersion, obj{"id": "cus_1"}),
		"created in year 318857":   withCreated(9_999_999_999_999),
		"created 2^63-1":           withCreated(math.MaxInt64),
		"created 1970":             withCreated(0),
		"created before 1970":      withCreated(-1),
		"created just before 2000": withCreated(time.Date(1999, 12, 31, 23, 59, 59, 0, time.UTC).Unix()),
		"created just after 2100":  withCreated(time.Date(2101, 1, 1, 0, 0, 0, 0, time.UTC).Unix()),
		"long charge id in a list": chargeRefundedWithList(long),
	}
	for name, body := range bodies {
		r := s.post(body, sign(body, testSecret, time.Now()))
		if r.status != http.StatusBadRequest || r.Error.Code != "invalid_event" {
			t.Errorf("%s: answered %d %.200s, want 400 invalid_event", name, r.status, r.raw)
		}
	}
	if n := s.rowsWritten(); n != 0 {
		t.Fatalf("%d rows written by refused events", n)
	}
	// The bounds themselves are fine.
	s.deliver(topupEvent("evt_"+strings.Repeat("b", 251), "cs_"+strings.Repeat("c", 252), "pi_ok", "acct_1", 100))
	s.wantBalance("acct_1", 100)
}

// chargeRefundedWithList is a charge.refunded whose refund list names a refund by a long id.
func chargeRefundedWithList(refundID string) []byte {
	return eventJSON("evt_list", "charge.refunded", "2022-08-01", obj{
		"id": "ch_1", "object": "charge", "payment_intent": "pi_1", "currency": "gbp",
		"refunds": obj{"object": "list", "has_more": false, "data": []obj{refundObject(refundID, "ch_1", "pi_1", 100, "succeeded")}},
	})
}

// TestWebhookRefusesSignaturesFromTheFuture: a timestamp more than 300 s ahead is refused like a stale
// one; a clock a little ahead is accepted.
func TestWebhookRefusesSignaturesFromTheFuture(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.createAccount("acct_1", "gbp")
	body := topupEvent("evt_future", "cs_f", "pi_f", "acct_1", 100)
	for _, ahead := range []time.Duration{10 * 365 * 24 * time.Hour, 301*time.Second + 5*time.Second} {
		if r := s.post(body, sign(body, testSecret, time.Now().Add(ahead))); r.status != http.StatusBadRequest || r.Error.Code != "stale_signature" {
			t.Fatalf("signed %s ahead: answered %d %s, want 400 stale_signature", ahead, r.status, r.raw)
		}
	}
	if n := s.rowsWritten(); n != 0 {
		t.Fatalf("%d rows written by refused deliveries", n)
	}
	if r := s.post(body, sign(body, testSecret, time.Now().Add(200*time.Second))); r.status != http.StatusOK || !r.Credited {
		t.Fatalf("signed 200 s ahead: answered %d %s, want credited", r.status, r.raw)
	}
}

// TestWebhookRefusesSeveralTimestamps: a Stripe-Signature holds one t=. With two, the future check and
// stripe-go's verification could read different ones (a signature minted for a far-future time passing
// as now), so such a header is refused whichever t= the signature is for.
func TestWebhookRefusesSeveralTimestamps(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.createAccount("acct_1", "gbp")
	body := topupEvent("evt_two_t", "cs_t", "pi_t", "acct_1", 100)
	now, future := time.Now(), time.Now().Add(10*365*24*time.Hour)
	for name, header := range map[string]string{
		"now first, signed for the future": fmt.Sprintf("t=%d,%s", now.Unix(), sign(body, testSecret, future)),
		"signed now, the future after":     sign(body, testSecret, now) + fmt.Sprintf(",t=%d", future.Unix()),
		"signed now, twice":                fmt.Sprintf("t=%d,%s", now.Unix(), sign(body, testSecret, now)),
	} {
		if r := s.post(body, header); r.status != http.StatusBadRequest || r.Error.Code != "invalid_signature" {
			t.Fatalf("%s (%s): answered %d %s, want 400 invalid_signature", name, header, r.status, r.raw)
		}
	}
	if n := s.rowsWritten(); n != 0 {
		t.Fatalf("%d rows written by refused deliveries", n)
	}
}

// TestWebhookMetricLabelsOnlyKnownTypes: event types the service does not handle are counted under
// type "other", so the number of series stays bounded however many types a sender invents.
func TestWebhookMetricLabelsOnlyKnownTypes(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	for i := range 50 {
		s.deliver(eventJSON(fmt.Sprintf("evt_invented_%d", i), fmt.Sprintf("invented.type_%d", i), apiVersion, obj{"id": "cus_1"}))
	}
	s.deliver(eventJSON("evt_pi", "payment_intent.succeeded", apiVersion, obj{"id": "pi_1"}))
	if got := testutil.ToFloat64(s.metrics.WebhookDeliveries.WithLabelValues("other", "ignored", "")); got != 50 {
		t.Errorf(`deliveries{type="other",outcome="ignored"} = %v, want 50`, got)
	}
	if got := testutil.ToFloat64(s.metrics.WebhookDeliveries.WithLabelValues("payment_intent.succeeded", "recorded", "")); got != 1 {
		t.Errorf(`deliveries{type="payment_intent.succeeded"} = %v, want 1`, got)
	}
	if got := testutil.CollectAndCount(s.metrics.WebhookDeliveries); got != 2 {
		t.Errorf("%d delivery series, want 2", got)
	}
}
