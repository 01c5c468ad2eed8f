package api

import (
	"net/http"
	"sync"
	"testing"

	"github.com/onceledger/onceledger/internal/config"
	"github.com/onceledger/onceledger/internal/stripefake"
)

// A top-up request with an Idempotency-Key is answered, on every retry of the same body, with the same
// order and Checkout Session (200); another body under the key is 409 with nothing written; the key is
// per account; without a key every request is a new order.
func TestTopupIdempotencyKey(t *testing.T) {
	t.Parallel()
	stripe := stripefake.New()
	t.Cleanup(stripe.Close)
	s := newServer(t, withStripe(stripe.URL))
	s.createAccount("acct_k", "usd", 0)
	s.createAccount("acct_other", "usd", 0)
	body := map[string]any{"amount": 1000, "success_url": "https://example.com/ok"}
	post := func(account, key string, body map[string]any) reply {
		return s.call(http.MethodPost, "/v1/accounts/"+account+"/topups", body, "Idempotency-Key", key)
	}

	first := post("acct_k", "order-1", body).want(t, http.StatusCreated, "")
	again := post("acct_k", "order-1", body).want(t, http.StatusOK, "")
	if first.JSON["topup"].(map[string]any)["id"] != again.JSON["topup"].(map[string]any)["id"] ||
		again.JSON["topup"].(map[string]any)["session_id"] != "cs_test_1" {
		t.Fatalf("retry answered another top-up: %s then %s", first.Body, again.Body)
	}
	post("acct_k", "order-1", map[string]any{"amount": 2000, "success_url": "https://example.com/ok"}).want(t, http.StatusConflict, "idempotency_conflict")
	post("acct_k", "order-1", map[string]any{"amount": 1000, "success_url": "https://example.com/ok", "cancel_url": "https://example.com/no"}).want(t, http.StatusConflict, "idempotency_conflict")
	post("acct_other", "order-1", body).want(t, http.StatusCreated, "")
	post("acct_k", "bad:key", body).want(t, http.StatusBadRequest, "invalid_idempotency_key")
	s.call(http.MethodPost, "/v1/accounts/acct_k/topups", body).want(t, http.StatusCreated, "")
	s.call(http.MethodPost, "/v1/accounts/acct_k/topups", body).want(t, http.StatusCreated, "")
	if n := s.count(`SELECT count(*) FROM topups WHERE account_id = 'acct_k'`); n != 3 {
		t.Fatalf("%d orders of acct_k, want 3 (one under the key, two without)", n)
	}
	if n := len(stripe.Sessions()); n != 4 {
		t.Fatalf("%d Checkout Sessions, want 4", n)
	}
}

// Concurrent identical requests under one key create one order and one Checkout Session, and every one
// of them answers it.
func TestConcurrentTopupRetriesCreateOneSession(t *testing.T) {
	t.Parallel()
	stripe := stripefake.New()
	t.Cleanup(stripe.Close)
	s := newServer(t, withStripe(stripe.URL))
	s.createAccount("acct_race", "usd", 0)
	const n = 16
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		ids      = map[any]int{}
		sessions = map[any]int{}
		statuses = map[int]int{}
	)
	for range n {
		wg.Go(func() {
			r := s.call(http.MethodPost, "/v1/accounts/acct_race/topups",
				map[string]any{"amount": 500, "success_url": "https://example.com/ok"}, "Idempotency-Key", "pay-once")
			mu.Lock()
			defer mu.Unlock()
			statuses[r.Status]++
			if topup, ok := r.JSON["topup"].(map[string]any); ok {
				ids[topup["id"]]++
				sessions[topup["session_id"]]++
			}
		})
	}
	wg.Wait()
	if statuses[http.StatusCreated] != 1 || statuses[http.StatusOK] != n-1 || len(ids) != 1 || len(sessions) != 1 {
		t.Fatalf("statuses %v, top-ups %v, sessions %v; want one 201, the rest 200, all one top-up and session", statuses, ids, sessions)
	}
	if got := len(stripe.Sessions()); got != 1 {
		t.Fatalf("%d Checkout Sessions created, want 1", got)
	}
	if c := s.count(`SELECT count(*) FROM topups WHERE account_id = 'acct_race'`); c != 1 {
		t.Fatalf("%d orders, want 1", c)
	}
}

// The order is the contract: a completion of an API-created order with another amount or currency is
// parked amount_mismatch and credits nothing; checkout.session.expired expires a pending order (shown by
// GET /v1/topups/{id}), and a completion arriving afterwards is parked order_expired, never credited.
func TestTopupOrderIsTheContract(t *testing.T) {
	t.Parallel()
	const secret = "whsec_test_contract"
	stripe := stripefake.New()
	t.Cleanup(stripe.Close)
	s := newServer(t, withStripe(stripe.URL), func(c *config.Config) { c.WebhookSecrets = []string{secret} })
	s.createAccount("acct_c", "usd", 0)
	order := func() (id, session string) {
		r := s.call(http.MethodPost, "/v1/accounts/acct_c/topups", map[string]any{"amount": 1000, "success_url": "https://example.com/ok"}).want(t, http.StatusCreated, "")
		topup := r.JSON["topup"].(map[string]any)
		return topup["id"].(string), topup["session_id"].(string)
	}
	deliver := func(eventID, eventType, session, paymentIntent string, amount int64, currency string) reply {
		t.Helper()
		body, signature := signedEvent(t, secret, eventID, eventType, map[string]any{
			"id": session, "object": "checkout.session", "payment_status": "paid", "amount_total": amount,
			"currency": currency, "payment_intent": paymentIntent, "metadata": map[string]any{"account_id": "acct_c"},
		})
		return s.call(http.MethodPost, "/webhooks/stripe", body, "Stripe-Signature", signature, "Authorization", "")
	}
	status := func(id string) any {
		return s.call(http.MethodGet, "/v1/topups/"+id, nil).want(t, http.StatusOK, "").JSON["topup"].(map[string]any)["status"]
	}

	id, session := order()
	for i, paid := range []struct {
		amount   int64
		currency string
	}{{1500, "usd"}, {1000, "eur"}} {
		r := deliver("evt_mismatch_"+string(rune('a'+i)), "checkout.session.completed", session, "pi_c", paid.amount, paid.currency).want(t, http.StatusOK, "")
		if r.JSON["parked"] != "amount_mismatch" || r.JSON["credited"] != false {
			t.Fatalf("completion of %d %s for an order of 1000 usd: %s", paid.amount, paid.currency, r.Body)
		}
	}
	s.wantMoney("acct_c", 0, 0)
	if st := status(id); st != "pending" {
		t.Fatalf("order after mismatched completions is %v, want pending", st)
	}

	expiredID, expiredSession := order()
	if r := deliver("evt_expired", "checkout.session.expired", expiredSession, "", 1000, "usd").want(t, http.StatusOK, ""); r.JSON["parked"] != nil {
		t.Fatalf("expiry: %s", r.Body)
	}
	if st := status(expiredID); st != "expired" {
		t.Fatalf("order after checkout.session.expired is %v, want expired", st)
	}
	late := deliver("evt_late", "checkout.session.completed", expiredSession, "pi_late", 1000, "usd").want(t, http.StatusOK, "")
	if late.JSON["parked"] != "order_expired" || late.JSON["credited"] != false {
		t.Fatalf("completion of an expired order: %s", late.Body)
	}
	if st := status(expiredID); st != "expired" {
		t.Fatalf("expired order became %v", st)
	}
	// Expiring a paid order changes nothing.
	if r := deliver("evt_paid", "checkout.session.completed", session, "pi_c", 1000, "usd").want(t, http.StatusOK, ""); r.JSON["credited"] != true {
		t.Fatalf("matching completion: %s", r.Body)
	}
	deliver("evt_expired_paid", "checkout.session.expired", session, "", 1000, "usd").want(t, http.StatusOK, "")
	if st := status(id); st != "paid" {
		t.Fatalf("paid order after an expiry event is %v", st)
	}
	s.wantMoney("acct_c", 1000, 1)
}
