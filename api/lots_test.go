package api

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// A positive adjustment's lot takes the terms it asked for; lots list in draw order; a debit's entry
// shows the lots it drew; a void takes what is left once, and the lot leaves the open list.
func TestLotsThroughTheAPI(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_l", "usd", 0)
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	adjust(s, "acct_l", "paid", map[string]any{"amount": 100, "category": "paid", "priority": 50}).want(t, http.StatusCreated, "")
	adjust(s, "acct_l", "soon", map[string]any{"amount": 40, "priority": 50, "expires_at": expires}).want(t, http.StatusCreated, "")
	adjust(s, "acct_l", "first", map[string]any{"amount": 10, "priority": 0}).want(t, http.StatusCreated, "")
	adjust(s, "acct_l", "bad", map[string]any{"amount": 10, "category": "gold"}).want(t, http.StatusBadRequest, "invalid_category")
	adjust(s, "acct_l", "bad", map[string]any{"amount": 10, "priority": 101}).want(t, http.StatusBadRequest, "invalid_priority")
	adjust(s, "acct_l", "bad", map[string]any{"amount": -10, "priority": 1}).want(t, http.StatusBadRequest, "invalid_lot_terms")

	lots := s.call(http.MethodGet, "/v1/accounts/acct_l/lots", nil).want(t, http.StatusOK, "").JSON["lots"].([]any)
	var order []string
	for _, l := range lots {
		lot := l.(map[string]any)
		order = append(order, fmt.Sprintf("%v/%v/%v", lot["amount"], lot["category"], lot["priority"]))
	}
	if fmt.Sprint(order) != "[10/promotional/0 40/promotional/50 100/paid/50]" {
		t.Fatalf("lots in draw order: %v", order)
	}
	if got := lots[1].(map[string]any)["expires_at"]; got != expires.Format(time.RFC3339) {
		t.Fatalf("expires_at %v, want %s", got, expires.Format(time.RFC3339))
	}

	adjust(s, "acct_l", "spend", map[string]any{"amount": -30}).want(t, http.StatusCreated, "")
	entries := s.call(http.MethodGet, "/v1/accounts/acct_l/entries", nil).want(t, http.StatusOK, "").JSON["entries"].([]any)
	drawn := map[any]any{}
	for _, d := range entries[0].(map[string]any)["draws"].([]any) {
		drawn[d.(map[string]any)["lot_id"]] = d.(map[string]any)["amount"]
	}
	first, soonID := lots[0].(map[string]any)["id"], lots[1].(map[string]any)["id"]
	if len(drawn) != 2 || drawn[first] != float64(10) || drawn[soonID] != float64(20) {
		t.Fatalf("the debit's draws: %v", drawn)
	}

	voided := s.call(http.MethodPost, fmt.Sprintf("/v1/lots/%.0f/void", soonID), nil).want(t, http.StatusOK, "")
	if voided.JSON["posted"] != true || voided.JSON["lot"].(map[string]any)["remaining"] != float64(0) {
		t.Fatalf("void: %s", voided.Body)
	}
	again := s.call(http.MethodPost, fmt.Sprintf("/v1/lots/%.0f/void", soonID), nil).want(t, http.StatusOK, "")
	if again.JSON["posted"] != false {
		t.Fatalf("void again: %s", again.Body)
	}
	s.call(http.MethodPost, "/v1/lots/999999/void", nil).want(t, http.StatusNotFound, "lot_not_found")
	s.call(http.MethodPost, "/v1/lots/x/void", nil).want(t, http.StatusNotFound, "lot_not_found")
	s.wantMoney("acct_l", 100, 5)
	if open := s.call(http.MethodGet, "/v1/accounts/acct_l/lots", nil).want(t, http.StatusOK, "").JSON["lots"].([]any); len(open) != 1 {
		t.Fatalf("open lots after the void: %v", open)
	}
	if all := s.call(http.MethodGet, "/v1/accounts/acct_l/lots?all=true", nil).want(t, http.StatusOK, "").JSON["lots"].([]any); len(all) != 3 {
		t.Fatalf("all lots: %v", all)
	}
	s.call(http.MethodGet, "/v1/accounts/nobody/lots", nil).want(t, http.StatusNotFound, "account_not_found")
	s.wantClean()
}
