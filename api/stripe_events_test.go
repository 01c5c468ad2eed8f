package api

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db"
)

func TestStripeEventsListingByOutcome(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	for i, outcome := range []string{"applied", "parked", "recorded", "parked", "ignored"} {
		e := db.Event{
			ID: fmt.Sprintf("evt_%d", i), Type: "charge.refunded", APIVersion: "2024-06-20",
			Created: time.Unix(1_700_000_000+int64(i), 0), Payload: []byte(`{}`), Outcome: outcome,
		}
		if outcome == "parked" {
			e.ParkedReason, e.PaymentIntent = "unknown_payment", e.ID
		}
		if _, err := db.RecordEvent(t.Context(), s.pool, e); err != nil {
			t.Fatal(err)
		}
	}

	var ids []string
	after := ""
	for {
		path := "/v1/stripe/events?limit=2"
		if after != "" {
			path += "&after=" + after
		}
		got := s.call(http.MethodGet, path, nil).want(t, http.StatusOK, "")
		for _, e := range got.JSON["events"].([]any) {
			ids = append(ids, e.(map[string]any)["id"].(string))
		}
		next, _ := got.JSON["next"].(string)
		if next == "" {
			break
		}
		after = next
	}
	if fmt.Sprint(ids) != "[evt_0 evt_1 evt_2 evt_3 evt_4]" {
		t.Fatalf("walked %v, want all five in arrival order", ids)
	}

	got := s.call(http.MethodGet, "/v1/stripe/events?outcome=parked", nil).want(t, http.StatusOK, "")
	events := got.JSON["events"].([]any)
	if len(events) != 2 || events[0].(map[string]any)["parked_reason"] != "unknown_payment" || got.JSON["next"] != nil {
		t.Fatalf("parked: %s", got.Body)
	}

	for _, bad := range []struct{ query, code string }{
		{"outcome=lost", "invalid_outcome"}, {"limit=0", "invalid_limit"}, {"limit=1000", "invalid_limit"},
		{"after=-1", "invalid_after"}, {"after=x", "invalid_after"},
	} {
		s.call(http.MethodGet, "/v1/stripe/events?"+bad.query, nil).want(t, http.StatusBadRequest, bad.code)
	}
}
