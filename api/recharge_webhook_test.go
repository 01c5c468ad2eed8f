package api_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

// rechargeAccount creates a gbp account holding balance with a saved card and recharge on: below
// 100, buy 500.
func (s *webhookServer) rechargeAccount(id string, balance int64) {
	s.t.Helper()
	ctx := context.Background()
	if _, err := dbtest.Ledger(s.t, s.pool).CreateAccount(ctx, id, "gbp", balance); err != nil {
		s.t.Fatal(err)
	}
	if err := db.SetStripeCustomer(ctx, s.pool, id, "cus_"+id); err != nil {
		s.t.Fatal(err)
	}
	if _, err := db.SetPaymentMethod(ctx, s.pool, id, "cus_"+id, "pm_"+id); err != nil {
		s.t.Fatal(err)
	}
	threshold, amount := int64(100), int64(500)
	if _, err := db.SetRecharge(ctx, s.pool, id, db.RechargeSettings{Enabled: true, Threshold: &threshold, Amount: &amount}); err != nil {
		s.t.Fatal(err)
	}
}

// debit posts an adjustment in its own transaction (the trigger runs at its commit).
func (s *webhookServer) debit(account, key string, amount int64) {
	s.t.Helper()
	err := db.InTx(context.Background(), s.pool, func(tx db.Tx) error {
		_, err := new(db.Ledger).Post(context.Background(), tx, db.Posting{
			AccountID: account, Kind: db.KindAdjustment, Amount: amount, DedupeKey: key,
		})
		return err
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// lastAttempt is the account's newest recharge attempt.
func (s *webhookServer) lastAttempt(account string) db.Attempt {
	s.t.Helper()
	attempts, err := db.Attempts(context.Background(), s.pool, account, 1)
	if err != nil || len(attempts) == 0 {
		s.t.Fatalf("attempts of %s: %v, %d", account, err, len(attempts))
	}
	return attempts[0]
}

func (s *webhookServer) automation(account string) db.Automation {
	s.t.Helper()
	a, err := db.GetAutomation(context.Background(), s.pool, account)
	if err != nil {
		s.t.Fatal(err)
	}
	return a
}

// paymentIntentEvent is a payment_intent.* event of an attempt's off-session PaymentIntent, as the
// recharge job creates it (metadata account_id and topup_id).
func paymentIntentEvent(eventID, eventType, paymentIntent string, a db.Attempt, failureCode string) []byte {
	o := obj{
		"id": paymentIntent, "object": "payment_intent", "amount": a.Amount, "currency": "gbp",
		"customer": "cus_" + a.AccountID, "payment_method": "pm_" + a.AccountID, "off_session": true,
		"metadata": obj{"account_id": a.AccountID, "topup_id": a.TopupID}, "last_payment_error": nil,
	}
	switch eventType {
	case "payment_intent.succeeded":
		o["status"] = "succeeded"
	case "payment_intent.requires_action":
		o["status"] = "requires_action"
	default:
		o["status"] = "requires_payment_method"
		o["last_payment_error"] = obj{"type": "card_error", "code": failureCode}
	}
	return eventJSON(eventID, eventType, apiVersion, o)
}

// A succeeded recharge delivered three times, and told again by a second event, credits once.
func TestRechargeSucceededDeliveredThreeTimesCreditsOnce(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.rechargeAccount("acct_rch", 1000)
	s.debit("acct_rch", "spend", -950)
	a := s.lastAttempt("acct_rch")
	if a.Status != db.AttemptRequested || a.Amount != 500 {
		t.Fatalf("attempt %+v", a)
	}
	body := paymentIntentEvent("evt_rch_ok", "payment_intent.succeeded", "pi_rch", a, "")
	credited := 0
	for range 3 {
		if s.deliver(body).Credited {
			credited++
		}
	}
	if reply := s.deliver(paymentIntentEvent("evt_rch_ok_again", "payment_intent.succeeded", "pi_rch", a, "")); reply.Credited {
		t.Fatal("a second event of the same payment credited")
	}
	if credited != 1 {
		t.Fatalf("credited %d times, want 1", credited)
	}
	s.wantBalance("acct_rch", 550)
	if got := s.count(`SELECT count(*) FROM ledger WHERE dedupe_key = 'stripe:evt_rch_ok' AND kind = 'topup' AND amount = 500`); got != 1 {
		t.Fatalf("%d credits keyed stripe:evt_rch_ok", got)
	}
	if got := s.lastAttempt("acct_rch"); got.Status != db.AttemptSucceeded || got.PaymentIntent != "pi_rch" {
		t.Fatalf("attempt after the payment: %+v", got)
	}
	order, err := db.GetTopup(context.Background(), s.pool, a.TopupID)
	if err != nil || order.Status != db.TopupPaid || order.PaymentIntent != "pi_rch" {
		t.Fatalf("order %+v, %v", order, err)
	}
	// Back above the threshold: the next dip is a new episode with its own attempt.
	s.debit("acct_rch", "spend2", -500)
	if next := s.lastAttempt("acct_rch"); next.ID == a.ID || next.Episode != a.Episode+1 {
		t.Fatalf("no new attempt for the next episode: %+v", next)
	}
}

// A payment of another amount than the order is not what was sold: parked, never credited.
func TestRechargeAmountMismatchParks(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.rechargeAccount("acct_rch_mm", 1000)
	s.debit("acct_rch_mm", "spend", -950)
	a := s.lastAttempt("acct_rch_mm")
	a.Amount = 499
	if reply := s.deliver(paymentIntentEvent("evt_rch_mm", "payment_intent.succeeded", "pi_mm", a, "")); reply.Parked != "amount_mismatch" {
		t.Fatalf("reply %+v, want parked amount_mismatch", reply)
	}
	s.wantBalance("acct_rch_mm", 50)
}

// Three failed attempts in a row turn recharge off; one failure delivered three times counts once.
func TestRechargeFailedThreeTimesDisables(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.rechargeAccount("acct_fail", 1000)
	for i := range 3 {
		s.debit("acct_fail", fmt.Sprintf("spend%d", i), -950) // below: an attempt
		a := s.lastAttempt("acct_fail")
		body := paymentIntentEvent(fmt.Sprintf("evt_fail_%d", i), "payment_intent.payment_failed", fmt.Sprintf("pi_fail_%d", i), a, "card_declined")
		for range 3 {
			s.deliver(body)
		}
		if got := s.automation("acct_fail"); int(got.RechargeFailures) != i+1 {
			t.Fatalf("after failure %d: %d failures counted", i+1, got.RechargeFailures)
		}
		if i < 2 {
			s.debit("acct_fail", fmt.Sprintf("back%d", i), 950) // recovered: a new episode
		}
	}
	got := s.automation("acct_fail")
	if got.RechargeEnabled {
		t.Fatal("recharge still on after three failures in a row")
	}
	last := s.lastAttempt("acct_fail")
	if last.Status != db.AttemptFailed || !last.DisabledRecharge || last.FailureCode != "card_declined" {
		t.Fatalf("last attempt %+v: want failed, card_declined, disabled recharge", last)
	}
	if n := s.count(`SELECT count(*) FROM recharge_attempts WHERE disabled_recharge`); n != 1 {
		t.Fatalf("%d attempts disabled recharge, want 1", n)
	}
	s.wantBalance("acct_fail", 50)
	// Off: a further dip makes no attempt.
	s.debit("acct_fail", "back2", 950)
	s.debit("acct_fail", "spend3", -950)
	if n := s.count(`SELECT count(*) FROM recharge_attempts WHERE account_id = 'acct_fail'`); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
}

// A card that needs its customer pauses the attempt: not a failure, never retried, the product told.
func TestRechargeRequiresActionPauses(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.rechargeAccount("acct_3ds", 1000)
	s.debit("acct_3ds", "spend", -950)
	a := s.lastAttempt("acct_3ds")
	s.deliver(paymentIntentEvent("evt_3ds", "payment_intent.payment_failed", "pi_3ds", a, "authentication_required"))
	if got := s.lastAttempt("acct_3ds"); got.Status != db.AttemptActionRequired {
		t.Fatalf("attempt %+v: want action_required", got)
	}
	if got := s.automation("acct_3ds"); got.RechargeFailures != 0 || !got.RechargeEnabled {
		t.Fatalf("a paused attempt counted as a failure: %+v", got)
	}
	// The customer authenticates later: the payment succeeds and the order is credited.
	if reply := s.deliver(paymentIntentEvent("evt_3ds_ok", "payment_intent.succeeded", "pi_3ds", a, "")); !reply.Credited {
		t.Fatalf("the authenticated payment was not credited: %+v", reply)
	}
	s.wantBalance("acct_3ds", 550)
}

// A Checkout top-up that saves the card: the completed session records the customer (when the
// account has none), its payment_intent.succeeded the card, and only the session credits.
func TestCheckoutSavesTheCard(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.createAccount("acct_save", "gbp")
	session := sessionObject("cs_save", "pi_save", "acct_save", 2000)
	session["customer"] = "cus_save"
	session["metadata"] = obj{"account_id": "acct_save", "topup_id": "cs_save"}
	if reply := s.deliver(eventJSON("evt_save_cs", "checkout.session.completed", apiVersion, session)); !reply.Credited {
		t.Fatalf("session not credited: %+v", reply)
	}
	if got := s.automation("acct_save"); got.StripeCustomer != "cus_save" {
		t.Fatalf("customer %q, want cus_save", got.StripeCustomer)
	}
	pi := obj{
		"id": "pi_save", "object": "payment_intent", "amount": 2000, "currency": "gbp", "status": "succeeded",
		"customer": "cus_save", "payment_method": "pm_save", "setup_future_usage": "off_session",
		"metadata": obj{"account_id": "acct_save", "topup_id": "cs_save"},
	}
	if reply := s.deliver(eventJSON("evt_save_pi", "payment_intent.succeeded", apiVersion, pi)); reply.Credited {
		t.Fatal("payment_intent.succeeded of a Checkout payment credited it twice")
	}
	if got := s.automation("acct_save"); got.PaymentMethod != "pm_save" {
		t.Fatalf("payment method %q, want pm_save", got.PaymentMethod)
	}
	s.wantBalance("acct_save", 2000)
	// A card of another customer is never recorded.
	pi["id"], pi["customer"], pi["payment_method"] = "pi_other", "cus_other", "pm_other"
	s.deliver(eventJSON("evt_other_pi", "payment_intent.succeeded", apiVersion, pi))
	if got := s.automation("acct_save"); got.PaymentMethod != "pm_save" {
		t.Fatalf("payment method %q after another customer's payment", got.PaymentMethod)
	}
}

// The card is recorded from the PaymentIntent fetched before the session's transaction when the
// session completes first, and the credit does not wait for it.
func TestCheckoutSavesTheCardBeforeItsPaymentEvent(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.createAccount("acct_early", "gbp")
	s.stripe.SetPaymentIntent("pi_early", "cus_early", "pm_early")
	session := sessionObject("cs_early", "pi_early", "acct_early", 2000)
	session["customer"] = "cus_early"
	if reply := s.deliver(eventJSON("evt_early_cs", "checkout.session.completed", apiVersion, session)); !reply.Credited {
		t.Fatalf("session not credited: %+v", reply)
	}
	if got := s.automation("acct_early"); got.StripeCustomer != "cus_early" || got.PaymentMethod != "pm_early" {
		t.Fatalf("saved %q / %q, want cus_early / pm_early", got.StripeCustomer, got.PaymentMethod)
	}
	// Stripe unavailable: credited all the same, the card left to its payment_intent.succeeded.
	s.createAccount("acct_down", "gbp")
	s.stripe.FailWith(http.StatusServiceUnavailable)
	session = sessionObject("cs_down", "pi_down", "acct_down", 2000)
	session["customer"] = "cus_down"
	if reply := s.deliver(eventJSON("evt_down_cs", "checkout.session.completed", apiVersion, session)); !reply.Credited {
		t.Fatalf("session not credited with Stripe down: %+v", reply)
	}
	if got := s.automation("acct_down"); got.StripeCustomer != "cus_down" || got.PaymentMethod != "" {
		t.Fatalf("saved %q / %q with Stripe down", got.StripeCustomer, got.PaymentMethod)
	}
}

// A hard decline told by the webhook (expired_card) forgets the card and stops recharge at the first
// failure; GET …/recharge says payment_method_required and lists the attempt with its decline code.
func TestRechargeHardDeclineStopsAtOnce(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.rechargeAccount("acct_expired", 1000)
	s.debit("acct_expired", "spend", -950)
	a := s.lastAttempt("acct_expired")
	s.deliver(paymentIntentEvent("evt_expired", "payment_intent.payment_failed", "pi_expired", a, "expired_card"))
	got := s.automation("acct_expired")
	if got.RechargeEnabled || got.PaymentMethod != "" || got.Stopped != db.RechargePaymentMethodRequired || got.RechargeFailures != 1 {
		t.Fatalf("after a hard decline: %+v", got)
	}
	if last := s.lastAttempt("acct_expired"); !last.HardDecline || last.RetryAt != nil || last.DeclineCode != "expired_card" {
		t.Fatalf("the declined attempt %+v: hard, no retry", last)
	}
	status, err := db.GetRechargeStatus(context.Background(), s.pool, "acct_expired")
	if err != nil || status.Status != db.RechargePaymentMethodRequired {
		t.Fatalf("status %+v, %v", status, err)
	}
}
