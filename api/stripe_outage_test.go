package api_test

import (
	"net/http"
	"testing"
	"time"
)

// A refund and a dispute that name only their charge (older API versions) find their payment through
// the Stripe API on their first delivery. Their redeliveries are answered duplicate from the recorded
// event before any Stripe call: 200 while Stripe is down, and no call to Stripe while it is up.
func TestRedeliveredChargeOnlyReversalsAreDuplicatesWithoutStripe(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.createAccount("acct_old", "gbp")
	s.stripe.SetCharge("ch_old", "pi_old")
	s.deliver(topupEvent("evt_old_paid", "cs_old", "pi_old", "acct_old", 1000))
	refund := eventJSON("evt_old_refund", "refund.created", apiVersion, obj{
		"id": "re_old", "object": "refund", "amount": 100, "currency": "gbp", "status": "succeeded", "charge": "ch_old",
	})
	dispute := eventJSON("evt_old_dispute", "charge.dispute.created", apiVersion, obj{
		"id": "du_old", "object": "dispute", "amount": 200, "currency": "gbp", "status": "needs_response", "charge": "ch_old",
	})
	for _, body := range [][]byte{refund, dispute} {
		if reply := s.deliver(body); reply.Reversed != 1 {
			t.Fatalf("first delivery of a charge-only reversal: %s", reply.raw)
		}
	}
	s.wantBalance("acct_old", 700)
	calls := s.stripe.Calls()

	for _, down := range []bool{true, false} {
		status := 0
		if down {
			status = http.StatusServiceUnavailable
		}
		s.stripe.FailWith(status)
		for _, body := range [][]byte{refund, dispute} {
			reply := s.post(body, sign(body, testSecret, time.Now()))
			if reply.status != http.StatusOK || !reply.Duplicate || reply.Reversed != 0 {
				t.Fatalf("redelivery with Stripe down=%t: %d %s; want 200 duplicate", down, reply.status, reply.raw)
			}
		}
	}
	if got := s.stripe.Calls(); got != calls {
		t.Fatalf("redeliveries called Stripe %d times, want none", got-calls)
	}
	s.wantBalance("acct_old", 700)
}

// A Stripe that accepts calls and never answers cannot hold a paid Checkout Session's credit: the
// session saves a card (its PaymentIntent names it) and a charge.refunded waits parked for its payment
// (its refund list comes from Stripe), yet the webhook answers well within Stripe's patience with the
// credit posted. The parked event is left to a job after commit; the card to the payment's
// payment_intent.succeeded.
func TestHangingStripeDoesNotHoldTheCredit(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.createAccount("acct_hang", "gbp")
	s.stripe.SetRefunds("ch_pi_hang", refundObject("re_hang", "ch_pi_hang", "pi_hang", 300, "succeeded"))
	if reply := s.deliver(chargeRefundedEvent("evt_hang_refunded", "pi_hang", 2000, 300)); reply.Parked != "unknown_payment" {
		t.Fatalf("charge.refunded before its payment: %s", reply.raw)
	}

	s.stripe.Hang(true)
	session := sessionObject("cs_hang", "pi_hang", "acct_hang", 2000)
	session["customer"] = "cus_hang"
	body := eventJSON("evt_hang_paid", "checkout.session.completed", apiVersion, session)
	start := time.Now()
	reply := s.post(body, sign(body, testSecret, time.Now()))
	elapsed := time.Since(start)
	if reply.status != http.StatusOK || !reply.Credited {
		t.Fatalf("paid session with Stripe hanging: %d %s", reply.status, reply.raw)
	}
	if elapsed >= 3*time.Second {
		t.Fatalf("the webhook answered after %s with Stripe hanging, want under 3s", elapsed.Round(time.Millisecond))
	}
	s.wantBalance("acct_hang", 2000)
	if outcome, reason := s.eventOutcome("evt_hang_refunded"); outcome != "parked" || reason != "unknown_payment" {
		t.Fatalf("parked charge.refunded is %s %s, want left parked for its job", outcome, reason)
	}
	if n := s.count(`SELECT count(*)::int FROM river_job WHERE kind = 'stripe_event_reapply' AND args->>'event_id' = 'evt_hang_refunded'`); n != 1 {
		t.Fatalf("%d jobs re-apply the parked charge.refunded, want 1", n)
	}
}
