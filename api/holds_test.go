package api

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db"
)

func authorise(s *server, account string, body any) reply {
	s.t.Helper()
	return s.call(http.MethodPost, "/v1/accounts/"+account+"/holds", body)
}

func capture(s *server, account, hold string, body any) reply {
	s.t.Helper()
	return s.call(http.MethodPost, "/v1/accounts/"+account+"/holds/"+hold+"/capture", body)
}

func void(s *server, account, hold string) reply {
	s.t.Helper()
	return s.call(http.MethodPost, "/v1/accounts/"+account+"/holds/"+hold+"/void", nil)
}

func getHold(s *server, account, hold string) reply {
	s.t.Helper()
	return s.call(http.MethodGet, "/v1/accounts/"+account+"/holds/"+hold, nil)
}

// wantHeld fails the test unless the account's balance, held and available are these.
func (s *server) wantHeld(account string, balance, held int64) {
	s.t.Helper()
	got := s.call(http.MethodGet, "/v1/accounts/"+account, nil).want(s.t, http.StatusOK, "")
	acct := got.JSON["account"].(map[string]any)
	if acct["balance"] != float64(balance) || acct["held"] != float64(held) || acct["available"] != float64(balance-held) {
		s.t.Fatalf("%s: %s, want balance %d, held %d, available %d", account, got.Body, balance, held, balance-held)
	}
}

// wantClean fails the test when verify reports anything.
func (s *server) wantClean() {
	s.t.Helper()
	violations, err := db.Verify(context.Background(), s.pool, time.Now(), time.Hour, time.Hour)
	if err != nil {
		s.t.Fatal(err)
	}
	if len(violations) > 0 {
		s.t.Fatalf("verify: %v", violations)
	}
}

func holdStatus(r reply) string {
	return r.JSON["hold"].(map[string]any)["status"].(string)
}

// The README's sequence: authorise 40, capture 37, the 3 released.
func TestHoldAuthoriseCaptureReleasesTheRest(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_h", "usd", 100)

	created := authorise(s, "acct_h", map[string]any{"id": "job-1", "amount": 40, "expires_in": "15m"}).want(t, http.StatusCreated, "")
	hold := created.JSON["hold"].(map[string]any)
	if hold["status"] != "held" || hold["amount"] != float64(40) || hold["captured_amount"] != nil || hold["resolved_at"] != nil {
		t.Fatalf("authorised: %s", created.Body)
	}
	s.wantHeld("acct_h", 100, 40)
	// A replay answers the stored hold and reserves nothing more; another amount is a conflict.
	authorise(s, "acct_h", map[string]any{"id": "job-1", "amount": 40}).want(t, http.StatusOK, "")
	authorise(s, "acct_h", map[string]any{"id": "job-1", "amount": 41}).want(t, http.StatusConflict, "idempotency_conflict")
	s.wantHeld("acct_h", 100, 40)

	captured := capture(s, "acct_h", "job-1", map[string]any{"amount": 37}).want(t, http.StatusOK, "")
	entry := captured.JSON["entry"].(map[string]any)
	if captured.JSON["posted"] != true || holdStatus(captured) != "captured" || entry["amount"] != float64(-37) ||
		entry["kind"] != "usage" || entry["dedupe_key"] != "hold:acct_h:job-1" {
		t.Fatalf("captured: %s", captured.Body)
	}
	s.wantHeld("acct_h", 63, 0)

	replay := capture(s, "acct_h", "job-1", map[string]any{"amount": 37}).want(t, http.StatusOK, "")
	if replay.JSON["posted"] != false || replay.JSON["entry"].(map[string]any)["id"] != entry["id"] {
		t.Fatalf("replay is not the original capture: %s", replay.Body)
	}
	capture(s, "acct_h", "job-1", map[string]any{"amount": 36}).want(t, http.StatusConflict, "idempotency_conflict")
	capture(s, "acct_h", "job-1", nil).want(t, http.StatusConflict, "idempotency_conflict") // all of it: 40
	capture(s, "acct_h", "job-1", map[string]any{"amount": 41}).want(t, http.StatusBadRequest, "amount_exceeds_hold")
	got := getHold(s, "acct_h", "job-1").want(t, http.StatusOK, "")
	if h := got.JSON["hold"].(map[string]any); h["status"] != "captured" || h["captured_amount"] != float64(37) || h["resolved_at"] == nil {
		t.Fatalf("after capture: %s", got.Body)
	}
	s.wantMoney("acct_h", 63, 2)
	s.wantClean()
}

func TestHoldDoubleVoidAnswersTheSameAndMovesNothing(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_v", "usd", 100)
	authorise(s, "acct_v", map[string]any{"id": "h", "amount": 60}).want(t, http.StatusCreated, "")

	first := void(s, "acct_v", "h").want(t, http.StatusOK, "")
	second := void(s, "acct_v", "h").want(t, http.StatusOK, "")
	if holdStatus(first) != "voided" || string(first.Body) != string(second.Body) {
		t.Fatalf("voids differ:\n%s\n%s", first.Body, second.Body)
	}
	s.wantHeld("acct_v", 100, 0)
	s.wantMoney("acct_v", 100, 1)
	s.wantClean()
}

func TestHoldCaptureAfterVoidAndVoidAfterCaptureAreRefused(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_cv", "usd", 100)
	authorise(s, "acct_cv", map[string]any{"id": "voided", "amount": 30}).want(t, http.StatusCreated, "")
	authorise(s, "acct_cv", map[string]any{"id": "captured", "amount": 30}).want(t, http.StatusCreated, "")

	void(s, "acct_cv", "voided").want(t, http.StatusOK, "")
	capture(s, "acct_cv", "voided", nil).want(t, http.StatusConflict, "hold_voided")
	capture(s, "acct_cv", "captured", nil).want(t, http.StatusOK, "")
	void(s, "acct_cv", "captured").want(t, http.StatusConflict, "hold_captured")

	if holdStatus(getHold(s, "acct_cv", "voided")) != "voided" || holdStatus(getHold(s, "acct_cv", "captured")) != "captured" {
		t.Fatal("a refused resolution changed a hold")
	}
	s.wantHeld("acct_cv", 70, 0)
	s.wantMoney("acct_cv", 70, 2)
	s.wantClean()
}

func TestHoldCaptureAboveTheHoldIsRefused(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_ab", "usd", 100)
	authorise(s, "acct_ab", map[string]any{"id": "h", "amount": 40}).want(t, http.StatusCreated, "")

	capture(s, "acct_ab", "h", map[string]any{"amount": 41}).want(t, http.StatusBadRequest, "amount_exceeds_hold")
	if holdStatus(getHold(s, "acct_ab", "h")) != "held" {
		t.Fatal("a refused capture resolved the hold")
	}
	s.wantHeld("acct_ab", 100, 40)
	capture(s, "acct_ab", "h", map[string]any{"amount": 40}).want(t, http.StatusOK, "")
	s.wantHeld("acct_ab", 60, 0)
	s.wantClean()
}

func TestHoldRefusedAuthorisationCanNeverBeCaptured(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_r", "usd", 100)
	authorise(s, "acct_r", map[string]any{"id": "big", "amount": 101}).want(t, http.StatusConflict, "insufficient_balance")

	capture(s, "acct_r", "big", nil).want(t, http.StatusNotFound, "hold_not_found")
	capture(s, "acct_r", "big", map[string]any{"amount": 1}).want(t, http.StatusNotFound, "hold_not_found")
	void(s, "acct_r", "big").want(t, http.StatusNotFound, "hold_not_found")
	getHold(s, "acct_r", "big").want(t, http.StatusNotFound, "hold_not_found")
	// Nor by a decision naming it.
	s.call(http.MethodPost, "/v1/decisions", []map[string]any{{"id": "d-big", "account_id": "acct_r", "cost": 101, "hold_id": "big"}}).
		want(t, http.StatusOK, "")
	if n := s.count(`SELECT count(*) FROM holds`); n != 0 {
		t.Fatalf("%d holds kept after a refused authorisation", n)
	}
	s.wantHeld("acct_r", 100, 0)
	s.wantMoney("acct_r", 100, 1)
}

// 64 captures and voids of one hold at once: exactly one resolution, and every answer agrees with it.
func TestHoldConcurrentCapturesAndVoidsResolveOnce(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_c", "usd", 100)
	authorise(s, "acct_c", map[string]any{"id": "h", "amount": 50}).want(t, http.StatusCreated, "")

	const n = 64
	replies := make([]reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				replies[i] = capture(s, "acct_c", "h", map[string]any{"amount": 45})
			} else {
				replies[i] = void(s, "acct_c", "h")
			}
		}()
	}
	wg.Wait()

	final := holdStatus(getHold(s, "acct_c", "h").want(t, http.StatusOK, ""))
	posted := 0
	for i, r := range replies {
		switch {
		case i%2 == 0 && final == "captured":
			r.want(t, http.StatusOK, "")
			if r.JSON["posted"] == true {
				posted++
			}
		case i%2 == 0:
			r.want(t, http.StatusConflict, "hold_voided")
		case final == "captured":
			r.want(t, http.StatusConflict, "hold_captured")
		default:
			r.want(t, http.StatusOK, "")
		}
	}
	switch final {
	case "captured":
		if posted != 1 {
			t.Fatalf("%d captures answered posted:true, want 1", posted)
		}
		s.wantHeld("acct_c", 55, 0)
		s.wantMoney("acct_c", 55, 2)
	case "voided":
		s.wantHeld("acct_c", 100, 0)
		s.wantMoney("acct_c", 100, 1)
	default:
		t.Fatalf("final status %q", final)
	}
	s.wantClean()
}

// 64 authorisations on one account at once never reserve more than its available balance.
func TestHoldConcurrentAuthorisationsNeverReserveMoreThanAvailable(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_a", "usd", 1000)

	const n = 64
	replies := make([]reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = authorise(s, "acct_a", map[string]any{"id": fmt.Sprintf("h%d", i), "amount": 30 + i%7})
		}()
	}
	wg.Wait()
	var reserved, created int64
	for i, r := range replies {
		switch r.Status {
		case http.StatusCreated:
			created++
			reserved += int64(30 + i%7)
		default:
			r.want(t, http.StatusConflict, "insufficient_balance")
		}
	}
	if reserved > 1000 || 1000-reserved >= 30 {
		t.Fatalf("%d authorisations reserved %d of 1000: over, or room left for another", created, reserved)
	}
	if n := s.count(`SELECT count(*) FROM holds WHERE status = 'held'`); n != created {
		t.Fatalf("%d holds kept, %d authorised", n, created)
	}
	s.wantHeld("acct_a", 1000, reserved)
	s.wantClean()
}

// A terminal hold never reports held: captured, voided and expired holds answer their status and
// when they were resolved, and a hold whose time is up answers expired even before the expiry pass.
func TestHoldTerminalNeverReportsHeld(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_t", "usd", 100)
	for id, ttl := range map[string]string{"c": "15m", "v": "15m", "e": "1s", "ev": "1s"} {
		authorise(s, "acct_t", map[string]any{"id": id, "amount": 10, "expires_in": ttl}).want(t, http.StatusCreated, "")
	}
	capture(s, "acct_t", "c", nil).want(t, http.StatusOK, "")
	void(s, "acct_t", "v").want(t, http.StatusOK, "")
	time.Sleep(1100 * time.Millisecond)
	capture(s, "acct_t", "e", nil).want(t, http.StatusConflict, "hold_expired")
	void(s, "acct_t", "ev").want(t, http.StatusConflict, "hold_expired")

	for id, want := range map[string]string{"c": "captured", "v": "voided", "e": "expired", "ev": "expired"} {
		got := getHold(s, "acct_t", id).want(t, http.StatusOK, "")
		h := got.JSON["hold"].(map[string]any)
		if h["status"] != want || h["resolved_at"] == nil {
			t.Fatalf("hold %s: %s, want %s and resolved", id, got.Body, want)
		}
	}
	s.wantHeld("acct_t", 90, 0)
	s.wantClean()
}

func TestHoldRefusesBadInput(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_bi", "usd", 100)
	authorise(s, "acct_bi", map[string]any{"id": "h", "amount": 10}).want(t, http.StatusCreated, "")
	cases := []struct {
		name, path string
		body       any
		status     int
		code       string
	}{
		{"no id", "/v1/accounts/acct_bi/holds", `{"amount":5}`, 400, "invalid_id"},
		{"bad id", "/v1/accounts/acct_bi/holds", `{"id":"a b","amount":5}`, 400, "invalid_id"},
		{"zero amount", "/v1/accounts/acct_bi/holds", `{"id":"x","amount":0}`, 400, "invalid_amount"},
		{"huge amount", "/v1/accounts/acct_bi/holds", `{"id":"x","amount":1000000000000001}`, 400, "invalid_amount"},
		{"expires_in too short", "/v1/accounts/acct_bi/holds", `{"id":"x","amount":5,"expires_in":"500ms"}`, 400, "invalid_expires_in"},
		{"expires_in too long", "/v1/accounts/acct_bi/holds", `{"id":"x","amount":5,"expires_in":"169h"}`, 400, "invalid_expires_in"},
		{"expires_in not a duration", "/v1/accounts/acct_bi/holds", `{"id":"x","amount":5,"expires_in":"soon"}`, 400, "invalid_expires_in"},
		{"unknown account", "/v1/accounts/acct_none/holds", `{"id":"x","amount":5}`, 404, "account_not_found"},
		{"capture zero", "/v1/accounts/acct_bi/holds/h/capture", `{"amount":0}`, 400, "invalid_amount"},
		{"capture unknown field", "/v1/accounts/acct_bi/holds/h/capture", `{"amount":1,"x":1}`, 400, "unknown_field"},
		{"capture bad hold id", "/v1/accounts/acct_bi/holds/a*b/capture", nil, 400, "invalid_hold_id"},
		{"capture unknown hold", "/v1/accounts/acct_bi/holds/nope/capture", nil, 404, "hold_not_found"},
		{"void unknown account", "/v1/accounts/acct_none/holds/h/void", nil, 404, "hold_not_found"},
		{"void with a body", "/v1/accounts/acct_bi/holds/h/void", `{"amount":1}`, 400, "unknown_field"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s.in(t).call(http.MethodPost, c.path, c.body).want(t, c.status, c.code)
		})
	}
	s.wantHeld("acct_bi", 100, 10)
}

func TestDecisionHoldIDIsPartOfTheDecision(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	post := func(batch ...map[string]any) reply {
		return s.call(http.MethodPost, "/v1/decisions", batch).want(t, http.StatusOK, "")
	}
	got := post(map[string]any{"id": "d1", "account_id": "a", "cost": 5, "hold_id": "h1"})
	if got.JSON["accepted"] != float64(1) {
		t.Fatalf("%s", got.Body)
	}
	got = post(
		map[string]any{"id": "d1", "account_id": "a", "cost": 5, "hold_id": "h1"},
		map[string]any{"id": "d1", "account_id": "a", "cost": 5, "hold_id": "h2"},
		map[string]any{"id": "d1", "account_id": "a", "cost": 5},
	)
	if got.JSON["duplicates"] != float64(1) || len(got.JSON["conflicts"].([]any)) != 1 {
		t.Fatalf("a decision id reused with another hold is not a conflict: %s", got.Body)
	}
	s.call(http.MethodPost, "/v1/decisions", []map[string]any{{"id": "d2", "account_id": "a", "cost": 5, "hold_id": "a b"}}).
		want(t, http.StatusBadRequest, "invalid_hold_id")
}
