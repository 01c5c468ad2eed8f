package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/pglocal"
)

// The demo's own secrets: it is both Stripe and the product, talking to a server it started.
const (
	demoWebhookSecret = "whsec_demo_onceledger_local_only"
	demoAPIKey        = "demo_key_local_only"
	demoStripeKey     = "sk_test_demo_local_only"
	demoAccount       = "acct_demo"
	demoAPIVersion    = "2024-06-20"
)

// demo shows every guarantee at work in under a minute: it runs the real `serve` on a scratch database
// of the configured PostgreSQL, with a loopback stand-in for the Stripe API, then sends it the traffic
// Stripe and the product would (signed webhooks, API calls) and prints each response and the balance.
// It fails when a balance differs from what the guarantees say it must be.
func demo(ctx context.Context, e env, getenv func(string) string) error {
	databaseURL, drop, err := scratchDatabase(ctx, e)
	if err != nil {
		return err
	}
	defer drop()
	ms, err := db.OpenMigrations(databaseURL)
	if err != nil {
		return err
	}
	err = ms.Up()
	ms.Close()
	if err != nil {
		return err
	}

	stripeAPI := newStripeStandIn()
	defer stripeAPI.Close()
	overrides := map[string]string{
		"DATABASE_URL":          databaseURL,
		"ADDR":                  "127.0.0.1:0",
		"STRIPE_API_BASE":       stripeAPI.URL,
		"STRIPE_SECRET_KEY":     demoStripeKey,
		"STRIPE_WEBHOOK_SECRET": demoWebhookSecret,
		"ONCELEDGER_API_KEYS":   demoAPIKey,
		"SIGNUP_GRANT":          "0",
		"NOTIFY_URL":            "",
		"RECONCILE_INTERVAL":    "1s",
	}
	base, logs, stop, err := startDemoServer(ctx, func(k string) string {
		if v, ok := overrides[k]; ok {
			return v
		}
		return getenv(k)
	})
	if err != nil {
		return err
	}
	defer stop()

	fmt.Fprintf(e.stdout, "onceledger demo: the real server at %s on scratch database %s\n", base, redactURL(databaseURL))
	fmt.Fprintf(e.stdout, "Stripe API: a loopback STAND-IN at %s (Checkout Sessions, a charge's refund list), not Stripe\n", stripeAPI.URL)
	d := &demoRun{out: e.stdout, base: base, stripe: stripeAPI, client: &http.Client{Timeout: 10 * time.Second}, events: map[string][]byte{}}
	if err := d.run(ctx); err != nil {
		return fmt.Errorf("%w\nserver log:\n%s", err, logs())
	}
	if d.mismatches > 0 {
		return fmt.Errorf("demo: %d steps ended at another balance than the guarantees require", d.mismatches)
	}
	fmt.Fprintln(e.stdout, "\nEvery step ended at the balance the guarantees require.")
	return nil
}

// scratchDatabase creates a fresh database on the configured server (DATABASE_URL's, or the one
// pglocal finds or starts) and returns its URL and a function that drops it.
func scratchDatabase(ctx context.Context, e env) (string, func(), error) {
	server := e.cfg.DatabaseURL
	if server == "" {
		var err error
		if server, err = pglocal.Server(ctx, e.cfg.DataDir, e.log); err != nil {
			return "", nil, fmt.Errorf("no DATABASE_URL and no local PostgreSQL: %w", err)
		}
	}
	name := fmt.Sprintf("onceledger_demo_%d", time.Now().UnixNano())
	url, err := pglocal.Database(ctx, server, name)
	if err != nil {
		return "", nil, err
	}
	drop := func() {
		ctx := context.WithoutCancel(ctx)
		conn, err := pgx.Connect(ctx, server)
		if err != nil {
			e.log.Warn("demo: scratch database left behind", "database", name, "err", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			e.log.Warn("demo: scratch database left behind", "database", name, "err", err)
		}
	}
	return url, drop, nil
}

func redactURL(u string) string {
	if i := strings.Index(u, "@"); i >= 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "…" + u[i:]
		}
	}
	return u
}

// startDemoServer runs `onceledger serve` in this process with getenv and returns its base URL, its
// log so far, and a function that stops it and waits.
func startDemoServer(ctx context.Context, getenv func(string) string) (string, func() string, func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	stdoutR, stdoutW := io.Pipe()
	var logMu sync.Mutex
	var logBuf bytes.Buffer
	logs := func() string {
		logMu.Lock()
		defer logMu.Unlock()
		return logBuf.String()
	}
	stderr := writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logBuf.Write(p)
	})
	done := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"serve"}, getenv, stdoutW, stderr)
		stdoutW.CloseWithError(io.EOF)
		done <- err
	}()
	stop := func() {
		cancel()
		<-done
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdoutR)
		for sc.Scan() {
			if _, url, ok := strings.Cut(sc.Text(), "listening on "); ok {
				addr <- strings.TrimSpace(url)
			}
		}
	}()
	select {
	case url := <-addr:
		return url, logs, stop, nil
	case err := <-done:
		cancel()
		return "", nil, nil, fmt.Errorf("demo: serve exited: %v\n%s", err, logs())
	case <-time.After(30 * time.Second):
		stop()
		return "", nil, nil, fmt.Errorf("demo: serve did not start\n%s", logs())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// stripeStandIn is a LOOPBACK STAND-IN for the Stripe API routes onceledger calls: creating a
// Checkout Session (POST /v1/checkout/sessions, the API's top-ups), listing a charge's refunds
// (GET /v1/refunds?charge=…, the webhook's charge.refunded) and listing events (GET /v1/events, the
// reconciler's missed-webhook search; always empty here). It answers from what the demo told it.
type stripeStandIn struct {
	*httptest.Server
	mu       sync.Mutex
	sessions int
	refunds  map[string][]map[string]any // charge id → its refunds, as Stripe would list them
}

func newStripeStandIn() *stripeStandIn {
	s := &stripeStandIn{refunds: map[string][]map[string]any{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

func (s *stripeStandIn) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/checkout/sessions":
		if err := r.ParseForm(); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		s.sessions++
		id := fmt.Sprintf("cs_demo_%d", s.sessions)
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": id, "object": "checkout.session", "mode": "payment", "status": "open", "payment_status": "unpaid",
			"url":                 "https://checkout.stripe.com/c/pay/" + id,
			"client_reference_id": r.PostForm.Get("client_reference_id"),
			"metadata": map[string]string{
				"account_id": r.PostForm.Get("metadata[account_id]"), "topup_id": r.PostForm.Get("metadata[topup_id]"),
			},
		})
	case r.Method == http.MethodGet && r.URL.Path == "/v1/refunds":
		data := s.refunds[r.URL.Query().Get("charge")]
		if data == nil {
			data = []map[string]any{}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "url": "/v1/refunds", "has_more": false, "data": data})
	case r.Method == http.MethodGet && r.URL.Path == "/v1/events":
		// The reconciler's search for missed webhooks: the demo delivers every event, so none are missed.
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "url": "/v1/events", "has_more": false, "data": []any{}})
	default:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"error":{"type":"invalid_request_error","message":"the demo's Stripe stand-in does not serve %s %s"}}`, r.Method, r.URL.Path)
	}
}

// setRefunds is what Stripe's refund list for charge says from now on.
func (s *stripeStandIn) setRefunds(charge string, refunds ...map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refunds[charge] = refunds
}

// demoRun sends the demo's requests and checks the balance after each step.
type demoRun struct {
	out    io.Writer
	base   string
	stripe *stripeStandIn
	client *http.Client
	// events holds each event's payload by id, so that a redelivery sends the same bytes, re-signed.
	events     map[string][]byte
	step       int
	mismatches int
}

// payment is a paid Checkout top-up, as the later refund and dispute events refer to it.
type payment struct{ intent, charge string }

func (d *demoRun) run(ctx context.Context) error {
	d.title("Create the account (PUT /v1/accounts/" + demoAccount + ")")
	if _, err := d.api(ctx, http.MethodPut, "/v1/accounts/"+demoAccount, `{"currency":"usd"}`, ""); err != nil {
		return err
	}
	if err := d.balance(ctx, 0); err != nil {
		return err
	}

	a, err := d.topup(ctx, "A", 1000, 1000)
	if err != nil {
		return err
	}

	d.title("Stripe redelivers the same completion event (re-signed): a replay moves nothing")
	if err := d.webhook(ctx, "evt_demo_paid_A", 1000); err != nil {
		return err
	}

	d.title("Refund 1 of payment A (300) succeeds: charge.refunded says amount_refunded=300")
	refund1 := refund("re_demo_1", a, 300, "succeeded")
	d.stripe.setRefunds(a.charge, refund1)
	if err := d.webhook(ctx, d.event("evt_demo_refunded_1", "charge.refunded", charge(a, 1000, 300)), 700); err != nil {
		return err
	}

	d.title("Refund 2 (200): charge.refunded again, amount_refunded=500 is CUMULATIVE — only the new refund moves")
	refund2 := refund("re_demo_2", a, 200, "succeeded")
	d.stripe.setRefunds(a.charge, refund1, refund2)
	if err := d.webhook(ctx, d.event("evt_demo_refunded_2", "charge.refunded", charge(a, 1000, 500)), 500); err != nil {
		return err
	}

	d.title("Refund 2 fails after succeeding (charge.refund.updated, status=failed): the 200 comes back")
	failed := refund("re_demo_2", a, 200, "failed")
	d.stripe.setRefunds(a.charge, refund1, failed)
	if err := d.webhook(ctx, d.event("evt_demo_refund_failed", "charge.refund.updated", failed), 700); err != nil {
		return err
	}

	b, err := d.topup(ctx, "B", 500, 1200)
	if err != nil {
		return err
	}

	d.title("Chargeback on payment B (charge.dispute.created, needs_response): funds withdrawn")
	if err := d.webhook(ctx, d.event("evt_demo_dispute_1_created", "charge.dispute.created", dispute("dp_demo_1", b, 500, "needs_response")), 700); err != nil {
		return err
	}
	d.title("The chargeback is lost (charge.dispute.closed, lost): already withdrawn, nothing more moves")
	if err := d.webhook(ctx, d.event("evt_demo_dispute_1_lost", "charge.dispute.closed", dispute("dp_demo_1", b, 500, "lost")), 700); err != nil {
		return err
	}

	d.title("Chargeback on payment A (charge.dispute.created, needs_response): funds withdrawn")
	if err := d.webhook(ctx, d.event("evt_demo_dispute_2_created", "charge.dispute.created", dispute("dp_demo_2", a, 400, "needs_response")), 300); err != nil {
		return err
	}
	d.title("The chargeback is won (charge.dispute.closed, won): funds reinstated")
	if err := d.webhook(ctx, d.event("evt_demo_dispute_2_won", "charge.dispute.closed", dispute("dp_demo_2", a, 400, "won")), 700); err != nil {
		return err
	}

	d.title("The product reports three billable decisions (POST /v1/decisions), then sends the batch again")
	batch := fmt.Sprintf(`[{"id":"dec_demo_1","account_id":%[1]q,"cost":10},{"id":"dec_demo_2","account_id":%[1]q,"cost":20},{"id":"dec_demo_3","account_id":%[1]q,"cost":30}]`, demoAccount)
	for range 2 {
		if _, err := d.api(ctx, http.MethodPost, "/v1/decisions", batch, ""); err != nil {
			return err
		}
	}
	fmt.Fprintln(d.out, "   stored once each; the reconciler bills them as usage keyed decision:{id}, once")
	if err := d.awaitBilling(ctx, 700-60); err != nil {
		return err
	}
	return d.hold(ctx, 640)
}

// hold authorises 40 before the work, captures the 37 it cost, and replays the capture: the balance
// moves by 37 once, and the 3 left are released.
func (d *demoRun) hold(ctx context.Context, balance int64) error {
	path := "/v1/accounts/" + demoAccount + "/holds"
	d.title("Before the work, the product authorises 40 (a hold: held, not spent; available drops by 40)")
	if _, err := d.api(ctx, http.MethodPost, path, `{"id":"job_demo_1","amount":40,"expires_in":"15m"}`, ""); err != nil {
		return err
	}
	if err := d.balance(ctx, balance); err != nil {
		return err
	}
	d.title("The work cost 37: capture 37 of the hold; the 3 left are released")
	if _, err := d.api(ctx, http.MethodPost, path+"/job_demo_1/capture", `{"amount":37}`, ""); err != nil {
		return err
	}
	if err := d.balance(ctx, balance-37); err != nil {
		return err
	}
	d.title("The capture is retried: a replay moves nothing")
	if _, err := d.api(ctx, http.MethodPost, path+"/job_demo_1/capture", `{"amount":37}`, ""); err != nil {
		return err
	}
	return d.balance(ctx, balance-37)
}

// topup creates a top-up through the API (a Checkout Session at the stand-in) and delivers Stripe's
// completion event for it.
func (d *demoRun) topup(ctx context.Context, name string, amount, want int64) (payment, error) {
	p := payment{intent: "pi_demo_" + name, charge: "ch_demo_" + name}
	d.title(fmt.Sprintf("Top-up %s: the product starts a Checkout for %d (POST /v1/accounts/%s/topups)", name, amount, demoAccount))
	body, err := d.api(ctx, http.MethodPost, "/v1/accounts/"+demoAccount+"/topups",
		fmt.Sprintf(`{"amount":%d,"success_url":"https://example.com/paid","cancel_url":"https://example.com/cancel"}`, amount), "")
	if err != nil {
		return p, err
	}
	var created struct {
		Topup struct {
			ID        string `json:"id"`
			SessionID string `json:"session_id"`
		} `json:"topup"`
	}
	if err := json.Unmarshal(body, &created); err != nil || created.Topup.SessionID == "" {
		return p, fmt.Errorf("demo: top-up %s was not created: %s", name, body)
	}
	d.title(fmt.Sprintf("Top-up %s is paid: Stripe sends checkout.session.completed", name))
	session := map[string]any{
		"id": created.Topup.SessionID, "object": "checkout.session", "mode": "payment", "status": "complete",
		"payment_status": "paid", "amount_total": amount, "currency": "usd", "payment_intent": p.intent,
		"client_reference_id": demoAccount,
		"metadata":            map[string]string{"account_id": demoAccount, "topup_id": created.Topup.ID},
	}
	return p, d.webhook(ctx, d.event("evt_demo_paid_"+name, "checkout.session.completed", session), want)
}

func charge(p payment, amount, refunded int64) map[string]any {
	// No "refunds" list: API versions since 2022-11-15 leave it out, so the webhook asks Stripe.
	return map[string]any{
		"id": p.charge, "object": "charge", "amount": amount, "amount_captured": amount, "amount_refunded": refunded,
		"currency": "usd", "payment_intent": p.intent, "paid": true, "refunded": refunded == amount, "status": "succeeded",
	}
}

func refund(id string, p payment, amount int64, status string) map[string]any {
	return map[string]any{
		"id": id, "object": "refund", "amount": amount, "currency": "usd", "charge": p.charge,
		"payment_intent": p.intent, "status": status, "metadata": map[string]string{},
	}
}

func dispute(id string, p payment, amount int64, status string) map[string]any {
	return map[string]any{
		"id": id, "object": "dispute", "amount": amount, "currency": "usd", "charge": p.charge,
		"payment_intent": p.intent, "status": status, "reason": "fraudulent", "is_charge_refundable": false,
		"metadata": map[string]string{},
	}
}

// event builds a Stripe event around object, as the endpoint's API version renders it.
func (d *demoRun) event(id, typ string, object map[string]any) string {
	payload, _ := json.Marshal(map[string]any{
		"id": id, "object": "event", "api_version": demoAPIVersion, "created": time.Now().Unix(), "livemode": false,
		"type": typ, "pending_webhooks": 1, "request": map[string]any{"id": nil, "idempotency_key": nil},
		"data": map[string]any{"object": object},
	})
	d.events[id] = payload
	return id
}

// webhook delivers a stored event to the real webhook, freshly signed, and checks the balance after.
func (d *demoRun) webhook(ctx context.Context, eventID string, want int64) error {
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: d.events[eventID], Secret: demoWebhookSecret})
	if _, err := d.send(ctx, http.MethodPost, "/webhooks/stripe", string(signed.Payload), "Stripe-Signature", signed.Header, eventID); err != nil {
		return err
	}
	return d.balance(ctx, want)
}

// api calls a /v1 route with the demo's key.
func (d *demoRun) api(ctx context.Context, method, path, body, note string) ([]byte, error) {
	return d.send(ctx, method, path, body, "Authorization", "Bearer "+demoAPIKey, note)
}

func (d *demoRun) send(ctx context.Context, method, path, body, header, value, note string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, d.base+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(header, value)
	resp, err := d.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("demo: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(d.out, "   %s\n   ← %d %s\n", strings.TrimSpace(method+" "+path+" "+note), resp.StatusCode, bytes.TrimSpace(reply))
	return reply, nil
}

func (d *demoRun) title(s string) {
	d.step++
	fmt.Fprintf(d.out, "\n%2d. %s\n", d.step, s)
}

func (d *demoRun) currentBalance(ctx context.Context) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.base+"/v1/accounts/"+demoAccount, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+demoAPIKey)
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var got struct {
		Account struct {
			Balance int64 `json:"balance"`
		} `json:"account"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK {
		return 0, errors.Join(fmt.Errorf("demo: reading the balance answered %d", resp.StatusCode), err)
	}
	return got.Account.Balance, nil
}

// balance prints the account's balance and whether it is the one the guarantees require.
func (d *demoRun) balance(ctx context.Context, want int64) error {
	got, err := d.currentBalance(ctx)
	if err != nil {
		return err
	}
	if got == want {
		fmt.Fprintf(d.out, "   balance %d ✓\n", got)
		return nil
	}
	d.mismatches++
	fmt.Fprintf(d.out, "   balance %d ✗ (the guarantees require %d)\n", got, want)
	return nil
}

// awaitBilling gives the reconciler (every RECONCILE_INTERVAL=1s in the demo) a few seconds to bill
// the decisions, then prints the balance.
func (d *demoRun) awaitBilling(ctx context.Context, want int64) error {
	deadline := time.Now().Add(5 * time.Second)
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
			fmt.Fprintf(d.out, "   balance %d: not billed within 5s: is the reconciler running in serve?\n", got)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
