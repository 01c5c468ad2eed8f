package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceledger/onceledger/client"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/stripefake"
)

// The Go client against the real `serve`, one route group a subtest, each on accounts of its own: what
// the client sends and decodes, and what the money does.

const clientKey = "key_client_e2e_onceledger_00000000"

// clientGrant is every account's signup grant here, so that each starts with credits to spend.
const clientGrant = 100

type clientServer struct {
	base, databaseURL string
	api               *client.ClientWithResponses
	stripe            *stripefake.Server
}

func TestClientEndToEnd(t *testing.T) {
	t.Parallel()
	s := &clientServer{databaseURL: dbtest.URL(t), stripe: stripefake.New()}
	t.Cleanup(s.stripe.Close)
	s.base = startServe(t, map[string]string{
		"DATABASE_URL": s.databaseURL, "ONCELEDGER_API_KEYS": clientKey, "STRIPE_WEBHOOK_SECRET": loadSecret,
		"STRIPE_SECRET_KEY": stripefake.SecretKey, "STRIPE_API_BASE": s.stripe.URL,
		"SIGNUP_GRANT": "100", "RECONCILE_INTERVAL": "1s",
	})
	var err error
	if s.api, err = client.New(s.base, clientKey, client.WithRetries(3, 10*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	for name, group := range map[string]func(*testing.T, *clientServer){
		"accounts": clientAccounts, "adjustments and balance": clientAdjustments, "holds": clientHolds,
		"decisions": clientDecisions, "top-ups": clientTopups, "lots": clientLots,
		"events and replay": clientEventsAndReplay, "history": clientHistory, "retries": clientRetries,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			group(t, s)
		})
	}
}

// open creates account in usd, with its grant.
func (s *clientServer) open(t *testing.T, account string) {
	t.Helper()
	if _, err := s.api.PutAccountWithResponse(context.Background(), account, client.PutAccountJSONRequestBody{Currency: "usd"}); err != nil {
		t.Fatal(err)
	}
}

func (s *clientServer) account(t *testing.T, account string) client.Account {
	t.Helper()
	res, err := s.api.GetAccountWithResponse(context.Background(), account)
	if err != nil {
		t.Fatal(err)
	}
	return res.JSON200.Account
}

// wantBalance fails the test unless account's balance and held are these.
func (s *clientServer) wantBalance(t *testing.T, account string, balance, held int64) {
	t.Helper()
	if a := s.account(t, account); a.Balance != balance || a.Held != held || a.Available != balance-held {
		t.Fatalf("%s: balance %d, held %d, available %d; want %d, %d, %d", account, a.Balance, a.Held, a.Available, balance, held, balance-held)
	}
}

// wantAPIError fails the test unless err is the API's refusal with status and code.
func wantAPIError(t *testing.T, err error, status int, code string) {
	t.Helper()
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != status || apiErr.Code != code {
		t.Fatalf("got %v, want the API's %d %s", err, status, code)
	}
}

func clientAccounts(t *testing.T, s *clientServer) {
	ctx := context.Background()
	usd := client.PutAccountJSONRequestBody{Currency: "usd"}
	created, err := s.api.PutAccountWithResponse(ctx, "acct_c_accounts", usd)
	if err != nil || created.JSON201 == nil || !created.JSON201.Created || !created.JSON201.Granted || created.JSON201.Account.Balance != clientGrant {
		t.Fatalf("create: %+v, %v; want 201, created with its grant", created, err)
	}
	again, err := s.api.PutAccountWithResponse(ctx, "acct_c_accounts", usd)
	if err != nil || again.JSON200 == nil || again.JSON200.Created || again.JSON200.Granted {
		t.Fatalf("create again: %+v, %v; want 200, nothing created or granted", again, err)
	}
	_, err = s.api.PutAccountWithResponse(ctx, "acct_c_accounts", client.PutAccountJSONRequestBody{Currency: "eur"})
	wantAPIError(t, err, http.StatusConflict, "currency_mismatch")
	_, err = s.api.GetAccountWithResponse(ctx, "acct_c_nobody")
	wantAPIError(t, err, http.StatusNotFound, "account_not_found")

	low := int64(50)
	if _, err := s.api.PutAlertsWithResponse(ctx, "acct_c_accounts", client.PutAlertsJSONRequestBody{LowBalance: &low}); err != nil {
		t.Fatal(err)
	}
	_, err = s.api.PutRechargeWithResponse(ctx, "acct_c_accounts", client.PutRechargeJSONRequestBody{Threshold: 10, Amount: 500, Enabled: true})
	wantAPIError(t, err, http.StatusConflict, "payment_method_required")
	a := s.account(t, "acct_c_accounts")
	if a.Balance != clientGrant || a.Alerts == nil || a.Alerts.LowBalance == nil || *a.Alerts.LowBalance != low || a.Recharge == nil || a.Recharge.Enabled {
		t.Fatalf("account %+v: want the grant, the alert at 50 and recharge off", a)
	}
}

func clientAdjustments(t *testing.T, s *clientServer) {
	ctx := context.Background()
	const acct = "acct_c_adjust"
	before := time.Now().Add(-time.Second)
	s.open(t, acct)
	key := &client.PostAdjustmentParams{IdempotencyKey: "credit-1"}
	credit := client.PostAdjustmentJSONRequestBody{Amount: 500}
	posted, err := s.api.PostAdjustmentWithResponse(ctx, acct, key, credit)
	if err != nil || posted.JSON201 == nil || !posted.JSON201.Posted || posted.JSON201.Entry.BalanceAfter != clientGrant+500 {
		t.Fatalf("credit: %+v, %v; want 201, posted", posted, err)
	}
	replay, err := s.api.PostAdjustmentWithResponse(ctx, acct, key, credit)
	if err != nil || replay.JSON200 == nil || replay.JSON200.Posted || replay.JSON200.Entry.ID != posted.JSON201.Entry.ID {
		t.Fatalf("the same key again: %+v, %v; want 200, the original entry", replay, err)
	}
	_, err = s.api.PostAdjustmentWithResponse(ctx, acct, key, client.PostAdjustmentJSONRequestBody{Amount: 501})
	wantAPIError(t, err, http.StatusConflict, "idempotency_conflict")
	_, err = s.api.PostAdjustmentWithResponse(ctx, acct, nil, client.PostAdjustmentJSONRequestBody{Amount: -10_000})
	wantAPIError(t, err, http.StatusConflict, "insufficient_balance")
	_, err = s.api.PostAdjustmentWithResponse(ctx, acct, nil, client.PostAdjustmentJSONRequestBody{Amount: 0})
	wantAPIError(t, err, http.StatusBadRequest, "invalid_amount")
	s.wantBalance(t, acct, clientGrant+500, 0)

	for at, want := range map[time.Time]int64{before: 0, time.Now().Add(time.Minute): clientGrant + 500} {
		res, err := s.api.GetBalanceAtWithResponse(ctx, acct, &client.GetBalanceAtParams{At: at})
		if err != nil || res.JSON200.Balance != want {
			t.Fatalf("balance at %s: %+v, %v; want %d", at, res, err, want)
		}
	}
}

func clientHolds(t *testing.T, s *clientServer) {
	ctx := context.Background()
	const acct = "acct_c_holds"
	s.open(t, acct)
	held, err := s.api.PostHoldWithResponse(ctx, acct, client.PostHoldJSONRequestBody{ID: "job_1", Amount: 40})
	if err != nil || held.JSON201 == nil || held.JSON201.Hold.Status != client.HoldStatusHeld {
		t.Fatalf("hold: %+v, %v; want 201, held", held, err)
	}
	s.wantBalance(t, acct, clientGrant, 40)
	got, err := s.api.GetHoldWithResponse(ctx, acct, "job_1")
	if err != nil || got.JSON200.Hold.Amount != 40 || got.JSON200.Hold.ResolvedAt != nil {
		t.Fatalf("get: %+v, %v", got, err)
	}
	cost := int64(37)
	for _, wantPosted := range []bool{true, false} {
		captured, err := s.api.CaptureHoldWithResponse(ctx, acct, "job_1", client.CaptureHoldJSONRequestBody{Amount: &cost})
		if err != nil || captured.JSON200.Posted != wantPosted || captured.JSON200.Entry.Amount != -37 || *captured.JSON200.Hold.CapturedAmount != 37 {
			t.Fatalf("capture (posted %v): %+v, %v", wantPosted, captured, err)
		}
	}
	s.wantBalance(t, acct, clientGrant-37, 0)

	if _, err := s.api.PostHoldWithResponse(ctx, acct, client.PostHoldJSONRequestBody{ID: "job_2", Amount: 20}); err != nil {
		t.Fatal(err)
	}
	voided, err := s.api.VoidHoldWithResponse(ctx, acct, "job_2")
	if err != nil || voided.JSON200.Hold.Status != client.HoldStatusVoided {
		t.Fatalf("void: %+v, %v", voided, err)
	}
	_, err = s.api.CaptureHoldWithResponse(ctx, acct, "job_2", client.CaptureHoldJSONRequestBody{})
	wantAPIError(t, err, http.StatusConflict, "hold_voided")
	_, err = s.api.PostHoldWithResponse(ctx, acct, client.PostHoldJSONRequestBody{ID: "job_3", Amount: 1000})
	wantAPIError(t, err, http.StatusConflict, "insufficient_balance")
	_, err = s.api.GetHoldWithResponse(ctx, acct, "job_3")
	wantAPIError(t, err, http.StatusNotFound, "hold_not_found")
	s.wantBalance(t, acct, clientGrant-37, 0)
}

func clientDecisions(t *testing.T, s *clientServer) {
	ctx := context.Background()
	const acct = "acct_c_decisions"
	s.open(t, acct)
	batch := client.PostDecisionsJSONRequestBody{{ID: "dec_c_1", AccountID: acct, Cost: 10}, {ID: "dec_c_2", AccountID: acct, Cost: 20}}
	first, err := s.api.PostDecisionsWithResponse(ctx, batch)
	if err != nil || first.JSON200.Accepted != 2 || first.JSON200.Duplicates != 0 {
		t.Fatalf("first: %+v, %v; want 2 accepted", first, err)
	}
	again, err := s.api.PostDecisionsWithResponse(ctx, append(batch, client.Decision{ID: "dec_c_1", AccountID: acct, Cost: 11}))
	if err != nil || again.JSON200.Accepted != 0 || again.JSON200.Duplicates != 2 || len(again.JSON200.Conflicts) != 1 || again.JSON200.Conflicts[0] != "dec_c_1" {
		t.Fatalf("again: %+v, %v; want 2 duplicates and dec_c_1 in conflict", again, err)
	}
	_, err = s.api.PostDecisionsWithResponse(ctx, client.PostDecisionsJSONRequestBody{})
	wantAPIError(t, err, http.StatusBadRequest, "empty_batch")

	// The reconciler (every second) bills each once.
	for deadline := time.Now().Add(20 * time.Second); s.account(t, acct).Balance != clientGrant-30; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("balance %d, want %d once billed", s.account(t, acct).Balance, clientGrant-30)
		}
	}
	time.Sleep(1500 * time.Millisecond) // another pass bills nothing more
	s.wantBalance(t, acct, clientGrant-30, 0)
}

func clientTopups(t *testing.T, s *clientServer) {
	ctx := context.Background()
	const acct = "acct_c_topups"
	s.open(t, acct)
	key := "topup-1"
	params := &client.PostTopupParams{IdempotencyKey: &key}
	body := client.PostTopupJSONRequestBody{Amount: 700, SuccessURL: "https://example.com/paid"}
	created, err := s.api.PostTopupWithResponse(ctx, acct, params, body)
	if err != nil || created.JSON201 == nil || created.JSON201.Topup.Status != client.TopupStatusPending || created.JSON201.Topup.SessionID == nil {
		t.Fatalf("top-up: %+v, %v; want 201, pending with its session", created, err)
	}
	topup := created.JSON201.Topup
	retried, err := s.api.PostTopupWithResponse(ctx, acct, params, body)
	if err != nil || retried.JSON200 == nil || retried.JSON200.Topup.ID != topup.ID || *retried.JSON200.Topup.SessionID != *topup.SessionID {
		t.Fatalf("retry: %+v, %v; want 200, the same top-up and session", retried, err)
	}
	_, err = s.api.PostTopupWithResponse(ctx, acct, params, client.PostTopupJSONRequestBody{Amount: 800, SuccessURL: body.SuccessURL})
	wantAPIError(t, err, http.StatusConflict, "idempotency_conflict")

	paid := stripeEvent("evt_c_topup_paid", "checkout.session.completed", map[string]any{
		"id": *topup.SessionID, "object": "checkout.session", "mode": "payment", "status": "complete",
		"payment_status": "paid", "amount_total": 700, "currency": "usd", "payment_intent": "pi_c_topup",
		"metadata": map[string]string{"account_id": acct, "topup_id": topup.ID},
	})
	if status, answer := postEvent(t, s.base, paid); status != http.StatusOK || answer["credited"] != true {
		t.Fatalf("webhook: %d %v", status, answer)
	}
	got, err := s.api.GetTopupWithResponse(ctx, topup.ID)
	if err != nil || got.JSON200.Topup.Status != client.TopupStatusPaid || got.JSON200.Topup.PaidAt == nil {
		t.Fatalf("get: %+v, %v; want paid", got, err)
	}
	s.wantBalance(t, acct, clientGrant+700, 0)
	_, err = s.api.GetTopupWithResponse(ctx, "top_c_nothing")
	wantAPIError(t, err, http.StatusNotFound, "topup_not_found")
}

func clientLots(t *testing.T, s *clientServer) {
	ctx := context.Background()
	const acct = "acct_c_lots"
	s.open(t, acct)
	paid, priority := client.PostAdjustmentJSONBodyCategoryPaid, 10
	if _, err := s.api.PostAdjustmentWithResponse(ctx, acct, nil, client.PostAdjustmentJSONRequestBody{Amount: 300, Category: &paid, Priority: &priority}); err != nil {
		t.Fatal(err)
	}
	lot := paidLot(t, s, acct, nil)
	if lot == nil || lot.Remaining != 300 || lot.Priority != 10 {
		t.Fatalf("paid lot %+v, want 300 left at priority 10", lot)
	}
	for _, wantPosted := range []bool{true, false} {
		voided, err := s.api.VoidLotWithResponse(ctx, strconv.FormatInt(lot.ID, 10))
		if err != nil || voided.JSON200.Posted != wantPosted || voided.JSON200.Lot.ClosedAt == nil || voided.JSON200.Lot.Remaining != 0 {
			t.Fatalf("void (posted %v): %+v, %v", wantPosted, voided, err)
		}
	}
	if open := paidLot(t, s, acct, nil); open != nil {
		t.Fatalf("the voided lot is still listed as open: %+v", open)
	}
	all := true
	if closed := paidLot(t, s, acct, &all); closed == nil || closed.ClosedAt == nil {
		t.Fatalf("all=true: %+v, want the closed lot", closed)
	}
	_, err := s.api.VoidLotWithResponse(ctx, "999999999")
	wantAPIError(t, err, http.StatusNotFound, "lot_not_found")
	s.wantBalance(t, acct, clientGrant, 0)
}

// paidLot is acct's paid lot, nil when none is listed.
func paidLot(t *testing.T, s *clientServer, acct string, all *bool) *client.Lot {
	t.Helper()
	res, err := s.api.ListLotsWithResponse(context.Background(), acct, &client.ListLotsParams{All: all})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range res.JSON200.Lots {
		if l.Category == client.LotCategoryPaid {
			return &l
		}
	}
	return nil
}

func clientEventsAndReplay(t *testing.T, s *clientServer) {
	ctx := context.Background()
	const acct, event = "acct_c_late", "evt_c_late"
	paid := stripeEvent(event, "checkout.session.completed", map[string]any{
		"id": "cs_c_late", "object": "checkout.session", "mode": "payment", "status": "complete",
		"payment_status": "paid", "amount_total": 250, "currency": "usd", "payment_intent": "pi_c_late",
		"client_reference_id": acct, "metadata": map[string]string{"account_id": acct},
	})
	if status, answer := postEvent(t, s.base, paid); status != http.StatusOK || answer["parked"] != "unknown_account" {
		t.Fatalf("webhook before the account: %d %v; want parked", status, answer)
	}
	if outcome := s.eventOutcome(t, client.ListStripeEventsParamsOutcomeParked, event); outcome == nil || *outcome.ParkedReason != client.StripeEventParkedReasonUnknownAccount {
		t.Fatalf("parked events: %+v, want %s parked for its account", outcome, event)
	}
	s.open(t, acct)
	vars := getenvFrom(map[string]string{"DATABASE_URL": s.databaseURL})
	for range 2 {
		if err := run(ctx, []string{"replay", event}, vars, &output{}, &output{}); err != nil {
			t.Fatalf("replay: %v", err)
		}
	}
	if outcome := s.eventOutcome(t, client.ListStripeEventsParamsOutcomeApplied, event); outcome == nil {
		t.Fatalf("%s is not listed as applied after its replay", event)
	}
	s.wantBalance(t, acct, clientGrant+250, 0)
	if drift, err := s.api.GetStripeDriftWithResponse(ctx); err != nil || drift.JSON200 == nil {
		t.Fatalf("drift report: %+v, %v", drift, err)
	}
	_, err := s.api.ListStripeEventsWithResponse(ctx, &client.ListStripeEventsParams{After: ptr("0")})
	wantAPIError(t, err, http.StatusBadRequest, "invalid_after")
}

// eventOutcome walks the stored events of outcome, page by page, for id; nil when it is not there.
func (s *clientServer) eventOutcome(t *testing.T, outcome client.ListStripeEventsParamsOutcome, id string) *client.StripeEvent {
	t.Helper()
	params := &client.ListStripeEventsParams{Outcome: &outcome, Limit: ptr(2)}
	for {
		res, err := s.api.ListStripeEventsWithResponse(context.Background(), params)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range res.JSON200.Events {
			if e.ID == id {
				return &e
			}
		}
		if res.JSON200.Next == nil {
			return nil
		}
		params.After = res.JSON200.Next
	}
}

func clientHistory(t *testing.T, s *clientServer) {
	ctx := context.Background()
	const acct = "acct_c_history"
	from := time.Now().Add(-time.Second)
	s.open(t, acct)
	for _, amount := range []int64{10, 20, 30} {
		if _, err := s.api.PostAdjustmentWithResponse(ctx, acct, nil, client.PostAdjustmentJSONRequestBody{Amount: amount}); err != nil {
			t.Fatal(err)
		}
	}
	// Two pages of two, newest first, every entry once, each balance the one before it plus its amount.
	var entries []client.Entry
	params := &client.ListEntriesParams{Limit: ptr(2)}
	for {
		res, err := s.api.ListEntriesWithResponse(ctx, acct, params)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, res.JSON200.Entries...)
		if res.JSON200.Next == nil {
			break
		}
		params.Before = res.JSON200.Next
	}
	if len(entries) != 4 || entries[0].BalanceAfter != clientGrant+60 {
		t.Fatalf("%d entries, the newest at %d; want 4, the newest at %d", len(entries), entries[0].BalanceAfter, clientGrant+60)
	}
	for i, e := range entries[:3] {
		if older := entries[i+1]; e.Seq != older.Seq+1 || e.BalanceAfter != older.BalanceAfter+e.Amount {
			t.Fatalf("entry %d (seq %d, %d after %d) does not follow entry seq %d at %d", e.ID, e.Seq, e.BalanceAfter, e.Amount, older.Seq, older.BalanceAfter)
		}
	}

	period := &client.GetStatementParams{From: from, To: time.Now().Add(time.Minute)}
	statement, err := s.api.GetStatementWithResponse(ctx, acct, period)
	if err != nil || statement.JSON200.OpeningBalance != 0 || statement.JSON200.ClosingBalance != clientGrant+60 || len(statement.JSON200.Entries) != 4 {
		t.Fatalf("statement: %+v, %v; want 0 to %d over 4 entries", statement, err, clientGrant+60)
	}
	csv := client.GetStatementParamsFormatCSV
	period.Format = &csv
	statement, err = s.api.GetStatementWithResponse(ctx, acct, period)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(statement.Body)), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "seq,id,created_at,kind") || *statement.Headers200.StatementClosingBalance != strconv.Itoa(clientGrant+60) {
		t.Fatalf("CSV statement (closing %v):\n%s", statement.Headers200.StatementClosingBalance, statement.Body)
	}
	_, err = s.api.GetStatementWithResponse(ctx, acct, &client.GetStatementParams{From: period.To, To: from})
	wantAPIError(t, err, http.StatusBadRequest, "invalid_to")
}

// clientRetries: a call answered 503 is retried with the same Idempotency-Key, whether the server
// refused it or did it and the answer was lost, and the money moves once; a 409 or 400 comes back at
// once as the API's code.
func clientRetries(t *testing.T, s *clientServer) {
	ctx := context.Background()
	const acct = "acct_c_retries"
	s.open(t, acct)
	for _, tc := range []struct {
		name string
		// forward: the first attempt reaches the server, which posts; only its answer is lost.
		forward    bool
		wantStatus int
	}{
		{"refused before the server", false, http.StatusCreated},
		{"answer lost after the server posted", true, http.StatusOK},
	} {
		flaky := &flakyTransport{forwardFirst: tc.forward}
		api, err := client.New(s.base, clientKey, client.WithDoer(&http.Client{Transport: flaky}), client.WithRetries(3, time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		before := s.account(t, acct).Balance
		res, err := api.PostAdjustmentWithResponse(ctx, acct, nil, client.PostAdjustmentJSONRequestBody{Amount: 25})
		if err != nil || res.StatusCode() != tc.wantStatus {
			t.Fatalf("%s: %+v, %v; want %d", tc.name, res, err, tc.wantStatus)
		}
		keys := flaky.keys()
		if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
			t.Fatalf("%s: Idempotency-Keys %q, want one key, twice", tc.name, keys)
		}
		s.wantBalance(t, acct, before+25, 0)
		if n := s.adjustmentsKeyed(t, acct, keys[0]); n != 1 {
			t.Fatalf("%s: %d entries keyed %s, want 1", tc.name, n, keys[0])
		}
	}

	counted := &flakyTransport{passAll: true}
	api, err := client.New(s.base, clientKey, client.WithDoer(&http.Client{Transport: counted}), client.WithRetries(3, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, err = api.PostAdjustmentWithResponse(ctx, acct, nil, client.PostAdjustmentJSONRequestBody{Amount: -100_000})
	wantAPIError(t, err, http.StatusConflict, "insufficient_balance")
	_, err = api.PostHoldWithResponse(ctx, acct, client.PostHoldJSONRequestBody{ID: "bad id", Amount: 1})
	wantAPIError(t, err, http.StatusBadRequest, "invalid_id")
	if n := len(counted.keys()); n != 2 {
		t.Fatalf("%d requests for two refused calls, want 2: never retried", n)
	}
	s.wantBalance(t, acct, clientGrant+50, 0)
}

// adjustmentsKeyed counts acct's entries posted under Idempotency-Key key.
func (s *clientServer) adjustmentsKeyed(t *testing.T, acct, key string) int {
	t.Helper()
	res, err := s.api.ListEntriesWithResponse(context.Background(), acct, &client.ListEntriesParams{Limit: ptr(500)})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range res.JSON200.Entries {
		if e.DedupeKey != nil && *e.DedupeKey == "api:"+acct+":"+key {
			n++
		}
	}
	return n
}

// flakyTransport answers the first request 503 unavailable, as a server out of connections would:
// without forwarding it, or (forwardFirst) after the server has answered it, losing that answer. Every
// request after the first goes through; passAll lets the first through too. It records each request's
// Idempotency-Key.
type flakyTransport struct {
	forwardFirst, passAll bool
	mu                    sync.Mutex
	seen                  []string
}

func (f *flakyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	f.seen = append(f.seen, req.Header.Get("Idempotency-Key"))
	first := len(f.seen) == 1 && !f.passAll
	f.mu.Unlock()
	if !first {
		return http.DefaultTransport.RoundTrip(req)
	}
	if f.forwardFirst {
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return &http.Response{
		StatusCode: http.StatusServiceUnavailable, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Request: req,
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   io.NopCloser(bytes.NewReader([]byte(`{"ok":false,"error":{"code":"unavailable","message":"try again"}}`))),
	}, nil
}

func (f *flakyTransport) keys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.seen...)
}

func ptr[T any](v T) *T { return &v }
