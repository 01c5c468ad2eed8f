package api

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

type decision = map[string]any

func TestDecisionsIntakeCountsDuplicatesAndConflicts(t *testing.T) {
	t.Parallel()
	s := newServer(t)

	first := s.call(http.MethodPost, "/v1/decisions", []decision{
		{"id": "d1", "account_id": "acct_a", "cost": 10},
		{"id": "d2", "account_id": "acct_a", "cost": 20, "occurred_at": "2026-01-02T03:04:05Z"},
	}).want(t, http.StatusOK, "")
	if fmt.Sprint(first.JSON) != "map[accepted:2 conflicts:[] duplicates:0]" {
		t.Fatalf("first batch: %s", first.Body)
	}

	second := s.call(http.MethodPost, "/v1/decisions", []decision{
		{"id": "d1", "account_id": "acct_a", "cost": 10}, // stored before: duplicate
		{"id": "d2", "account_id": "acct_a", "cost": 99}, // stored before with another cost: conflict
		{"id": "d3", "account_id": "acct_b", "cost": 5},  // new
		{"id": "d3", "account_id": "acct_b", "cost": 5},  // repeated in the batch: duplicate
		{"id": "d4", "account_id": "acct_a", "cost": 1},  // new
		{"id": "d4", "account_id": "acct_b", "cost": 1},  // repeated with another account: conflict
		{"id": "d1", "account_id": "acct_a", "cost": 10}, // duplicate again
		// Stored before with another account (on Citus, on another shard): conflict.
		{"id": "d1", "account_id": "acct_b", "cost": 10},
	}).want(t, http.StatusOK, "")
	if second.JSON["accepted"] != float64(2) || second.JSON["duplicates"] != float64(3) ||
		fmt.Sprint(second.JSON["conflicts"]) != "[d2 d4 d1]" {
		t.Fatalf("second batch: %s, want accepted 2, duplicates 3, conflicts [d2 d4 d1]", second.Body)
	}

	rows, err := s.pool.Query(t.Context(), `SELECT id || ':' || account_id || ':' || cost FROM decisions ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var stored []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			t.Fatal(err)
		}
		stored = append(stored, r)
	}
	if want := []string{"d1:acct_a:10", "d2:acct_a:20", "d3:acct_b:5", "d4:acct_a:1"}; !slices.Equal(stored, want) {
		t.Fatalf("stored %v, want %v (conflicts leave the first stored decision as it was)", stored, want)
	}
	if n := s.count(`SELECT count(*) FROM decisions WHERE id = 'd2' AND occurred_at = '2026-01-02T03:04:05Z'`); n != 1 {
		t.Fatal("occurred_at was not stored as sent")
	}
}

func TestDecisionsRefuseBadInputWholly(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	good := `{"id":"ok1","account_id":"acct_a","cost":3}`
	tooMany := make([]decision, 10_001)
	for i := range tooMany {
		tooMany[i] = decision{"id": fmt.Sprintf("d%d", i), "account_id": "acct_a", "cost": 1}
	}
	cases := []struct {
		name   string
		body   any
		status int
		code   string
	}{
		{"object instead of array", good, 400, "invalid_body"},
		{"null", `null`, 400, "invalid_json"},
		{"empty array", `[]`, 400, "empty_batch"},
		{"empty body", ``, 400, "empty_body"},
		{"too many", tooMany, 413, "too_many_decisions"},
		{"missing id", `[` + good + `,{"account_id":"acct_a","cost":3}]`, 400, "invalid_id"},
		{"id too long", `[` + good + `,{"id":"` + strings.Repeat("i", 129) + `","account_id":"acct_a","cost":3}]`, 400, "invalid_id"},
		{"bad account_id", `[` + good + `,{"id":"x","account_id":"a b","cost":3}]`, 400, "invalid_account_id"},
		{"zero cost", `[` + good + `,{"id":"x","account_id":"acct_a","cost":0}]`, 400, "invalid_cost"},
		{"negative cost", `[` + good + `,{"id":"x","account_id":"acct_a","cost":-3}]`, 400, "invalid_cost"},
		{"fractional cost", `[` + good + `,{"id":"x","account_id":"acct_a","cost":2.5}]`, 400, "invalid_cost"},
		{"huge cost", `[` + good + `,{"id":"x","account_id":"acct_a","cost":9223372036854775807}]`, 400, "invalid_cost"},
		{"missing cost", `[` + good + `,{"id":"x","account_id":"acct_a"}]`, 400, "invalid_cost"},
		{"bad occurred_at", `[` + good + `,{"id":"x","account_id":"acct_a","cost":1,"occurred_at":"yesterday"}]`, 400, "invalid_occurred_at"},
		{"unknown field", `[` + good + `,{"id":"x","account_id":"acct_a","cost":1,"billed":true}]`, 400, "unknown_field"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s.in(t).call(http.MethodPost, "/v1/decisions", c.body).want(t, c.status, c.code)
		})
	}
	if n := s.count(`SELECT count(*) FROM decisions`); n != 0 {
		t.Fatalf("refused batches stored %d decisions", n)
	}
}

func TestDecisionsFullBatch(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	batch := make([]decision, 10_000)
	for i := range batch {
		batch[i] = decision{"id": fmt.Sprintf("dec_%05d", i), "account_id": "acct_big", "cost": 2}
	}
	got := s.call(http.MethodPost, "/v1/decisions", batch).want(t, http.StatusOK, "")
	if got.JSON["accepted"] != float64(10_000) {
		t.Fatalf("full batch: %s", got.Body)
	}
	again := s.call(http.MethodPost, "/v1/decisions", batch).want(t, http.StatusOK, "")
	if again.JSON["accepted"] != float64(0) || again.JSON["duplicates"] != float64(10_000) {
		t.Fatalf("replayed batch: %s", again.Body)
	}
	if n := s.count(`SELECT coalesce(sum(cost), 0) FROM decisions`); n != 20_000 {
		t.Fatalf("stored cost %d, want 20000", n)
	}
}
