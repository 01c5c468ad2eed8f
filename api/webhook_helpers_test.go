package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/api"
	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/config"
	"github.com/onceledger/onceledger/internal/metrics"
	"github.com/onceledger/onceledger/internal/stripefake"
	"github.com/onceledger/onceledger/internal/tracing"
)

const (
	testSecret = "whsec_test_primary"
	apiVersion = "2024-06-20"
)

// webhookServer is the real HTTP surface on a fresh database, with a fake Stripe API behind it.
type webhookServer struct {
	t       *testing.T
	pool    *pgxpool.Pool
	url     string
	stripe  *stripefake.Server
	metrics *metrics.Metrics
}

type serverOption func(*config.Config)

func withoutStripeKey(c *config.Config) { c.StripeSecretKey = "" }

func withSecrets(secrets ...string) serverOption {
	return func(c *config.Config) { c.WebhookSecrets = secrets }
}

func newWebhookServer(t *testing.T, opts ...serverOption) *webhookServer {
	t.Helper()
	return newWebhookServerOn(t, dbtest.New(t), nil, opts...)
}

// newWebhookServerOn is newWebhookServer on pool's database, traced by tr when it is set.
func newWebhookServerOn(t *testing.T, pool *pgxpool.Pool, tr *tracing.Tracing, opts ...serverOption) *webhookServer {
	t.Helper()
	stripe := stripefake.New()
	t.Cleanup(stripe.Close)
	cfg := config.Config{WebhookSecrets: []string{testSecret}, StripeSecretKey: stripefake.SecretKey, StripeAPIBase: stripe.URL}
	for _, opt := range opts {
		opt(&cfg)
	}
	m := metrics.New()
	deps := api.WiredDeps(pool, cfg, discardLog(), db.LedgerConfig{Observe: m.ObservePosting, Tracing: tr})
	deps.Metrics = m
	srv := httptest.NewServer(api.NewHandler(deps))
	t.Cleanup(srv.Close)
	return &webhookServer{t: t, pool: pool, url: srv.URL, stripe: stripe, metrics: m}
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// webhookReply is the webhook's answer, success or error.
type webhookReply struct {
	status    int
	OK        bool   `json:"ok"`
	Event     string `json:"event"`
	Duplicate bool   `json:"duplicate"`
	Credited  bool   `json:"credited"`
	Reversed  int    `json:"reversed"`
	Restored  int    `json:"restored"`
	Parked    string `json:"parked"`
	Error     struct {
		Code string `json:"code"`
	} `json:"error"`
	raw string
}

// post sends body with the given Stripe-Signature header (none when empty).
func (s *webhookServer) post(body []byte, signature string) webhookReply {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url+"/webhooks/stripe", bytes.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if signature != "" {
		req.Header.Set("Stripe-Signature", signature)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("POST /webhooks/stripe: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	reply := webhookReply{status: resp.StatusCode, raw: string(raw)}
	if err := json.Unmarshal(raw, &reply); err != nil {
		s.t.Fatalf("reply %d is not JSON: %s", resp.StatusCode, raw)
	}
	return reply
}

// deliver signs body as Stripe does now and expects a 200.
func (s *webhookServer) deliver(body []byte) webhookReply {
	s.t.Helper()
	reply := s.post(body, sign(body, testSecret, time.Now()))
	if reply.status != http.StatusOK || !reply.OK {
		s.t.Fatalf("delivery answered %d: %s", reply.status, reply.raw)
	}
	return reply
}

// sign is the Stripe-Signature header of body signed with secret at a time.
var sign = stripefake.Sign

func (s *webhookServer) createAccount(id, currency string) {
	s.t.Helper()
	if _, err := dbtest.Ledger(s.t, s.pool).CreateAccount(context.Background(), id, currency, 0); err != nil {
		s.t.Fatalf("create account %s: %v", id, err)
	}
}

func (s *webhookServer) balance(account string) int64 {
	s.t.Helper()
	acct, err := db.GetAccount(context.Background(), s.pool, account)
	if err != nil {
		s.t.Fatal(err)
	}
	return acct.Balance
}

func (s *webhookServer) wantBalance(account string, want int64) {
	s.t.Helper()
	if got := s.balance(account); got != want {
		s.t.Errorf("balance of %s is %d, want %d", account, got, want)
	}
}

// entries returns the account's entries as "kind amount key", sorted, so orders compare equal.
func (s *webhookServer) entries(account string) []string {
	s.t.Helper()
	entries, err := db.Entries(context.Background(), s.pool, account, 0, 1000)
	if err != nil {
		s.t.Fatal(err)
	}
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.Kind + " " + strconv.FormatInt(e.Amount, 10) + " " + e.DedupeKey + " " + e.PaymentIntent
	}
	sort.Strings(out)
	return out
}

func (s *webhookServer) count(query string, args ...any) int {
	s.t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		s.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// rowsWritten counts every row a delivery could have written.
func (s *webhookServer) rowsWritten() int {
	return s.count(`SELECT (SELECT count(*) FROM stripe_events) + (SELECT count(*) FROM ledger) + (SELECT count(*) FROM topups)`)
}

func (s *webhookServer) eventOutcome(eventID string) (outcome, reason string) {
	s.t.Helper()
	var parked *string
	err := s.pool.QueryRow(context.Background(),
		`SELECT outcome, parked_reason FROM stripe_events WHERE event_id = $1`, eventID).Scan(&outcome, &parked)
	if err != nil {
		s.t.Fatalf("outcome of %s: %v", eventID, err)
	}
	if parked != nil {
		reason = *parked
	}
	return outcome, reason
}

// Payload builders: real field names and shapes (see the Stripe API reference), only what matters.

type obj = map[string]any

// eventJSON is a Stripe event around an object, at an API version.
var eventJSON = stripefake.Event

func sessionObject(sessionID, paymentIntent, account string, amount int64) obj {
	return obj{
		"id": sessionID, "object": "checkout.session", "mode": "payment", "status": "complete",
		"payment_status": "paid", "amount_total": amount, "amount_subtotal": amount, "currency": "gbp",
		"client_reference_id": nil, "metadata": obj{"account_id": account}, "payment_intent": paymentIntent,
	}
}

func topupEvent(eventID, sessionID, paymentIntent, account string, amount int64) []byte {
	return eventJSON(eventID, "checkout.session.completed", apiVersion, sessionObject(sessionID, paymentIntent, account, amount))
}

func refundObject(refundID, charge, paymentIntent string, amount int64, status string) obj {
	return obj{
		"id": refundID, "object": "refund", "amount": amount, "currency": "gbp", "status": status,
		"charge": charge, "payment_intent": paymentIntent, "metadata": obj{}, "reason": nil,
	}
}

func refundEvent(eventType, eventID, refundID, paymentIntent string, amount int64, status string) []byte {
	return eventJSON(eventID, eventType, apiVersion, refundObject(refundID, "ch_"+paymentIntent, paymentIntent, amount, status))
}

// chargeRefundedEvent is charge.refunded at an API version without the refunds list: only the
// cumulative amount_refunded, which must never be used.
func chargeRefundedEvent(eventID, paymentIntent string, amount, amountRefunded int64) []byte {
	return eventJSON(eventID, "charge.refunded", apiVersion, obj{
		"id": "ch_" + paymentIntent, "object": "charge", "amount": amount, "amount_captured": amount,
		"amount_refunded": amountRefunded, "currency": "gbp", "paid": true, "refunded": amountRefunded == amount,
		"payment_intent": paymentIntent, "metadata": obj{}, "status": "succeeded",
	})
}

func disputeEvent(eventType, eventID, disputeID, paymentIntent string, amount int64, status, caseType string) []byte {
	return eventJSON(eventID, eventType, apiVersion, obj{
		"id": disputeID, "object": "dispute", "amount": amount, "currency": "gbp", "status": status,
		"charge": "ch_" + paymentIntent, "payment_intent": paymentIntent, "metadata": obj{},
		"reason": "fraudulent", "balance_transactions": []obj{},
		"payment_method_details": obj{"type": "card", "card": obj{"brand": "visa", "case_type": caseType}},
	})
}
