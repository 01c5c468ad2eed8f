package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/onceledger/onceledger/client"
	"github.com/onceledger/onceledger/internal/stripefake"
)

// demoAPIVersion is the API version the demo's events are rendered in, as a current endpoint's are.
const demoAPIVersion = "2024-06-20"

// demoRun is the demo's scenario: it sends the requests Stripe and the product would (signed webhooks,
// API calls through the Go client), prints each response, and checks the balance after each step.
type demoRun struct {
	out    io.Writer
	base   string
	secret string
	// suffix makes every name the demo uses its own (empty against its own scratch server).
	suffix  string
	account string
	// stripe is the Stripe API the server talks to, when the demo started both; nil when driving a
	// server whose Stripe is not ours: then top-ups are paid without the API's Checkout, and
	// charge.refunded carries its refund list (as API versions before 2022-11-15 render it).
	stripe *stripefake.Server
	// api is the product's client of the API, printing each call and its answer; reads is the same
	// client unprinted, for the balance checks.
	api, reads *client.ClientWithResponses
	// http sends Stripe's webhooks, which the client does not wrap: they are Stripe's to send.
	http *http.Client
	// events holds each event's payload by id, so that a redelivery sends the same bytes, re-signed.
	events map[string][]byte
	// opening is the account's balance when created (a signup grant): every expected balance is
	// relative to it.
	opening     int64
	billingWait time.Duration
	step        int
	mismatches  int
}

func newDemoRun(out io.Writer, base, secret, apiKey, tag string, stripe *stripefake.Server) (*demoRun, error) {
	d := &demoRun{
		out: out, base: base, secret: secret, stripe: stripe,
		http: &http.Client{Timeout: 10 * time.Second}, events: map[string][]byte{}, billingWait: 5 * time.Second,
	}
	var err error
	if d.api, err = client.New(base, apiKey, client.WithDoer(printer{out: out, next: d.http})); err != nil {
		return nil, err
	}
	if d.reads, err = client.New(base, apiKey, client.WithDoer(d.http)); err != nil {
		return nil, err
	}
	if tag != "" {
		d.suffix = "_" + tag
	}
	d.account = d.name("acct_demo")
	return d, nil
}

// printer prints each request it sends and the answer, as the demo shows the API at work.
type printer struct {
	out  io.Writer
	next client.HttpRequestDoer
}

func (p printer) Do(req *http.Request) (*http.Response, error) {
	resp, err := p.next.Do(req)
	if err != nil {
		return nil, err
	}
	reply, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(reply))
	p.print(req.Method+" "+req.URL.RequestURI(), resp.StatusCode, reply)
	return resp, nil
}

func (p printer) print(request string, status int, reply []byte) {
	fmt.Fprintf(p.out, "   %s\n   ← %d %s\n", request, status, bytes.TrimSpace(reply))
}

// name is id made the demo run's own.
func (d *demoRun) name(id string) string { return id + d.suffix }

// conclude is the demo's verdict, once run returned err.
func (d *demoRun) conclude(err error) error {
	if err != nil {
		return err
	}
	if d.mismatches > 0 {
		return fmt.Errorf("demo: %d steps ended at another balance than the guarantees require", d.mismatches)
	}
	fmt.Fprintln(d.out, "\nEvery step ended at the balance the guarantees require.")
	return nil
}

// payment is a paid Checkout top-up, as the later refund and dispute events refer to it.
type payment struct{ intent, charge string }

func (d *demoRun) run(ctx context.Context) error {
	d.title("Create the account (PUT /v1/accounts/" + d.account + ")")
	if _, err := d.api.PutAccountWithResponse(ctx, d.account, client.PutAccountJSONRequestBody{Currency: "usd"}); err != nil {
		return err
	}
	opening, err := d.currentBalance(ctx)
	if err != nil {
		return err
	}
	d.opening = opening
	if err := d.balance(ctx, 0); err != nil {
		return err
	}

	a, err := d.topup(ctx, "A", 1000, 1000)
	if err != nil {
		return err
	}

	d.title("Stripe redelivers the same completion event (re-signed): a replay moves nothing")
	if err := d.webhook(ctx, d.name("evt_demo_paid_A"), 1000); err != nil {
		return err
	}

	d.title("Refund 1 of payment A (300) succeeds: charge.refunded says amount_refunded=300")
	refund1 := d.refund("re_demo_1", a, 300, "succeeded")
	if err := d.webhook(ctx, d.chargeRefunded("evt_demo_refunded_1", a, 1000, 300, refund1), 700); err != nil {
		return err
	}

	d.title("Refund 2 (200): charge.refunded again, amount_refunded=500 is CUMULATIVE — only the new refund moves")
	refund2 := d.refund("re_demo_2", a, 200, "succeeded")
	if err := d.webhook(ctx, d.chargeRefunded("evt_demo_refunded_2", a, 1000, 500, refund1, refund2), 500); err != nil {
		return err
	}

	d.title("Refund 2 fails after succeeding (charge.refund.updated, status=failed): the 200 comes back")
	failed := d.refund("re_demo_2", a, 200, "failed")
	if d.stripe != nil {
		d.stripe.SetRefunds(a.charge, refund1, failed)
	}
	if err := d.webhook(ctx, d.event("evt_demo_refund_failed", "charge.refund.updated", demoAPIVersion, failed), 700); err != nil {
		return err
	}

	b, err := d.topup(ctx, "B", 500, 1200)
	if err != nil {
		return err
	}

	for _, step := range []struct {
		title, eventID, eventType string
		object                    map[string]any
		want                      int64
	}{
		{"Chargeback on payment B (charge.dispute.created, needs_response): funds withdrawn",
			"evt_demo_dispute_1_created", "charge.dispute.created", d.dispute("dp_demo_1", b, 500, "needs_response"), 700},
		{"The chargeback is lost (charge.dispute.closed, lost): already withdrawn, nothing more moves",
			"evt_demo_dispute_1_lost", "charge.dispute.closed", d.dispute("dp_demo_1", b, 500, "lost"), 700},
		{"Chargeback on payment A (charge.dispute.created, needs_response): funds withdrawn",
			"evt_demo_dispute_2_created", "charge.dispute.created", d.dispute("dp_demo_2", a, 400, "needs_response"), 300},
		{"The chargeback is won (charge.dispute.closed, won): funds reinstated",
			"evt_demo_dispute_2_won", "charge.dispute.closed", d.dispute("dp_demo_2", a, 400, "won"), 700},
	} {
		d.title(step.title)
		if err := d.webhook(ctx, d.event(step.eventID, step.eventType, demoAPIVersion, step.object), step.want); err != nil {
			return err
		}
	}

	d.title("The product reports three billable decisions (POST /v1/decisions), then sends the batch again")
	batch := client.PostDecisionsJSONRequestBody{
		{ID: d.name("dec_demo_1"), AccountID: d.account, Cost: 10},
		{ID: d.name("dec_demo_2"), AccountID: d.account, Cost: 20},
		{ID: d.name("dec_demo_3"), AccountID: d.account, Cost: 30},
	}
	for range 2 {
		if _, err := d.api.PostDecisionsWithResponse(ctx, batch); err != nil {
			return err
		}
	}
	fmt.Fprintln(d.out, "   stored once each; the reconciler bills them as usage keyed decision:{id}, once")
	if err := d.awaitBilling(ctx, 700-60); err != nil {
		return err
	}
	if err := d.hold(ctx, 640); err != nil {
		return err
	}
	if d.stripe == nil {
		return nil // auto-recharge charges the server's Stripe, which is not ours to answer
	}
	return d.recharge(ctx, 603)
}

// recharge saves a card with a top-up, opts in to auto-recharge, and bills a decision that takes the
// balance below the threshold: the server charges the card off-session by itself, once, and the
// credit comes with Stripe's payment_intent.succeeded, once however often it is delivered.
func (d *demoRun) recharge(ctx context.Context, balance int64) error {
	card := d.name("pm_demo_card")
	d.title("Top-up C saves the card for later (POST …/topups with save_payment_method: a Stripe customer, setup_future_usage=off_session)")
	saveCard := true
	created, err := d.startTopup(ctx, "C", client.PostTopupJSONRequestBody{Amount: 500, SuccessURL: "https://example.com/paid", SavePaymentMethod: &saveCard})
	if err != nil {
		return err
	}
	customer := fmt.Sprintf("cus_test_%d", len(d.stripe.Customers()))
	intent := d.name("pi_demo_C")
	d.stripe.SetPaymentIntent(intent, customer, card)
	d.title("Top-up C is paid: the server records the customer and, from the payment, the card")
	if err := d.webhook(ctx, d.event("evt_demo_paid_C", "checkout.session.completed", demoAPIVersion, map[string]any{
		"id": *created.SessionID, "object": "checkout.session", "mode": "payment", "status": "complete",
		"payment_status": "paid", "amount_total": 500, "currency": "usd", "payment_intent": intent, "customer": customer,
		"metadata": map[string]string{"account_id": d.account, "topup_id": created.ID},
	}), balance+500); err != nil {
		return err
	}
	d.title("Opt in: below 1000 available, buy 2000 (PUT …/recharge)")
	if _, err := d.api.PutRechargeWithResponse(ctx, d.account, client.PutRechargeJSONRequestBody{Threshold: 1000, Amount: 2000, Enabled: true}); err != nil {
		return err
	}
	d.title("A decision costing 200 is billed: available 903 < 1000, so its transaction records one recharge attempt")
	if _, err := d.api.PostDecisionsWithResponse(ctx, client.PostDecisionsJSONRequestBody{{ID: d.name("dec_demo_4"), AccountID: d.account, Cost: 200}}); err != nil {
		return err
	}
	if err := d.awaitBilling(ctx, balance+300); err != nil {
		return err
	}
	deadline := time.Now().Add(d.billingWait + 10*time.Second)
	for len(d.stripe.PaymentIntents()) == 0 {
		if time.Now().After(deadline) {
			return errors.New("demo: the server created no PaymentIntent for the recharge attempt")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	form := d.stripe.PaymentIntents()[0]
	fmt.Fprintf(d.out, "   the server created an off-session PaymentIntent of %s %s on %s (Idempotency-Key %s)\n",
		form.Get("amount"), form.Get("currency"), form.Get("payment_method"), d.stripe.PaymentIntentKeys()[0])
	paid := d.event("evt_demo_recharged", "payment_intent.succeeded", demoAPIVersion, map[string]any{
		"id": "pi_test_1", "object": "payment_intent", "status": "succeeded", "amount": 2000, "currency": "usd",
		"customer": customer, "payment_method": card, "off_session": true,
		"metadata": map[string]string{"account_id": form.Get("metadata[account_id]"), "topup_id": form.Get("metadata[topup_id]")},
	})
	d.title("Stripe says the recharge succeeded (payment_intent.succeeded): credited through the top-up's guard")
	if err := d.webhook(ctx, paid, balance+2300); err != nil {
		return err
	}
	d.title("Stripe redelivers it: a replay moves nothing")
	return d.webhook(ctx, paid, balance+2300)
}

// hold authorises 40 before the work, captures the 37 it cost, and replays the capture: the balance
// moves by 37 once, and the 3 left are released.
func (d *demoRun) hold(ctx context.Context, balance int64) error {
	hold := d.name("job_demo_1")
	expiresIn, cost := "15m", int64(37)
	d.title("Before the work, the product authorises 40 (a hold: held, not spent; available drops by 40)")
	if _, err := d.api.PostHoldWithResponse(ctx, d.account, client.PostHoldJSONRequestBody{ID: hold, Amount: 40, ExpiresIn: &expiresIn}); err != nil {
		return err
	}
	if err := d.balance(ctx, balance); err != nil {
		return err
	}
	d.title("The work cost 37: capture 37 of the hold; the 3 left are released")
	if _, err := d.api.CaptureHoldWithResponse(ctx, d.account, hold, client.CaptureHoldJSONRequestBody{Amount: &cost}); err != nil {
		return err
	}
	if err := d.balance(ctx, balance-37); err != nil {
		return err
	}
	d.title("The capture is retried: a replay moves nothing")
	if _, err := d.api.CaptureHoldWithResponse(ctx, d.account, hold, client.CaptureHoldJSONRequestBody{Amount: &cost}); err != nil {
		return err
	}
	return d.balance(ctx, balance-37)
}

// topup pays amount into the account with a Checkout Session and delivers Stripe's completion event
// for it. The session is created through the API (POST …/topups) when the demo is the server's Stripe;
// otherwise the product created it itself, naming the account in its metadata.
func (d *demoRun) topup(ctx context.Context, name string, amount, want int64) (payment, error) {
	p := payment{intent: d.name("pi_demo_" + name), charge: d.name("ch_demo_" + name)}
	session := map[string]any{
		"id": d.name("cs_demo_" + name), "object": "checkout.session", "mode": "payment", "status": "complete",
		"payment_status": "paid", "amount_total": amount, "currency": "usd", "payment_intent": p.intent,
		"client_reference_id": d.account, "metadata": map[string]string{"account_id": d.account},
	}
	if d.stripe != nil {
		d.title(fmt.Sprintf("Top-up %s: the product starts a Checkout for %d (POST /v1/accounts/%s/topups)", name, amount, d.account))
		cancel := "https://example.com/cancel"
		created, err := d.startTopup(ctx, name, client.PostTopupJSONRequestBody{Amount: amount, SuccessURL: "https://example.com/paid", CancelURL: &cancel})
		if err != nil {
			return p, err
		}
		session["id"] = *created.SessionID
		session["metadata"] = map[string]string{"account_id": d.account, "topup_id": created.ID}
	}
	d.title(fmt.Sprintf("Top-up %s is paid: Stripe sends checkout.session.completed", name))
	return p, d.webhook(ctx, d.event("evt_demo_paid_"+name, "checkout.session.completed", demoAPIVersion, session), want)
}

// startTopup creates top-up name's Checkout Session through the API.
func (d *demoRun) startTopup(ctx context.Context, name string, body client.PostTopupJSONRequestBody) (client.Topup, error) {
	res, err := d.api.PostTopupWithResponse(ctx, d.account, nil, body)
	if err != nil {
		return client.Topup{}, err
	}
	if res.JSON201 == nil || res.JSON201.Topup.SessionID == nil {
		return client.Topup{}, fmt.Errorf("demo: top-up %s was not created: %d %s", name, res.StatusCode(), res.Body)
	}
	return res.JSON201.Topup, nil
}

// chargeRefunded is charge.refunded for p, whose refunds are now refunds. When the demo is the server's
// Stripe, the event leaves the list out (API versions since 2022-11-15) and the server asks for it;
// otherwise the event carries it whole (earlier versions).
func (d *demoRun) chargeRefunded(eventID string, p payment, amount, refunded int64, refunds ...map[string]any) string {
	c := map[string]any{
		"id": p.charge, "object": "charge", "amount": amount, "amount_captured": amount, "amount_refunded": refunded,
		"currency": "usd", "payment_intent": p.intent, "paid": true, "refunded": refunded == amount, "status": "succeeded",
	}
	if d.stripe != nil {
		d.stripe.SetRefunds(p.charge, refunds...)
		return d.event(eventID, "charge.refunded", demoAPIVersion, c)
	}
	c["refunds"] = map[string]any{"object": "list", "data": refunds, "has_more": false}
	return d.event(eventID, "charge.refunded", "2022-08-01", c)
}

func (d *demoRun) refund(id string, p payment, amount int64, status string) map[string]any {
	return map[string]any{
		"id": d.name(id), "object": "refund", "amount": amount, "currency": "usd", "charge": p.charge,
		"payment_intent": p.intent, "status": status, "metadata": map[string]string{},
	}
}

func (d *demoRun) dispute(id string, p payment, amount int64, status string) map[string]any {
	return map[string]any{
		"id": d.name(id), "object": "dispute", "amount": amount, "currency": "usd", "charge": p.charge,
		"payment_intent": p.intent, "status": status, "reason": "fraudulent", "is_charge_refundable": false,
		"metadata": map[string]string{},
	}
}

// event stores a Stripe event around object, as an endpoint at apiVersion receives it, and returns
// its id.
func (d *demoRun) event(id, typ, apiVersion string, object map[string]any) string {
	id = d.name(id)
	d.events[id] = stripefake.Event(id, typ, apiVersion, object)
	return id
}

// webhook delivers a stored event to the real webhook, freshly signed, as Stripe would, and checks the
// balance after.
func (d *demoRun) webhook(ctx context.Context, eventID string, want int64) error {
	payload := d.events[eventID]
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.base+"/webhooks/stripe", bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", stripefake.Sign(payload, d.secret, time.Now()))
	resp, err := d.http.Do(req)
	if err != nil {
		return fmt.Errorf("demo: delivering %s: %w", eventID, err)
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	printer{out: d.out}.print("POST /webhooks/stripe "+eventID, resp.StatusCode, reply)
	return d.balance(ctx, want)
}

func (d *demoRun) title(s string) {
	d.step++
	fmt.Fprintf(d.out, "\n%2d. %s\n", d.step, s)
}

func (d *demoRun) currentBalance(ctx context.Context) (int64, error) {
	res, err := d.reads.GetAccountWithResponse(ctx, d.account)
	if err != nil {
		return 0, fmt.Errorf("demo: reading the balance: %w", err)
	}
	if res.JSON200 == nil {
		return 0, fmt.Errorf("demo: reading the balance answered %d %s", res.StatusCode(), res.Body)
	}
	return res.JSON200.Account.Balance, nil
}

// balance prints the account's balance and whether it is the one the guarantees require (want, above
// the opening balance).
func (d *demoRun) balance(ctx context.Context, want int64) error {
	got, err := d.currentBalance(ctx)
	if err != nil {
		return err
	}
	if got == d.opening+want {
		fmt.Fprintf(d.out, "   balance %d ✓\n", got)
		return nil
	}
	d.mismatches++
	fmt.Fprintf(d.out, "   balance %d ✗ (the guarantees require %d)\n", got, d.opening+want)
	return nil
}

// awaitBilling gives the server's reconciler (every RECONCILE_INTERVAL) up to billingWait to bill the
// decisions, then prints the balance.
func (d *demoRun) awaitBilling(ctx context.Context, want int64) error {
	want += d.opening
	deadline := time.Now().Add(d.billingWait)
	for {
		got, err := d.currentBalance(ctx)
		if err != nil {
			return err
		}
		if got == want {
			fmt.Fprintf(d.out, "   billed: balance %d ✓\n", got)
			return nil
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(d.out, "   balance %d: not billed within %s: is the reconciler running in serve?\n", got, d.billingWait)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
