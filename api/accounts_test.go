package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"

	"github.com/onceledger/onceledger/internal/config"
)

func TestPutAccountCreatesOnceAndGrantsOnce(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) { c.SignupGrant = 500 })

	got := s.call(http.MethodPut, "/v1/accounts/acct_1", map[string]string{"currency": "usd"}).want(t, http.StatusCreated, "")
	if got.JSON["created"] != true || got.JSON["granted"] != true {
		t.Fatalf("first PUT: %s", got.Body)
	}
	if b := got.JSON["account"].(map[string]any)["balance"]; b != float64(500) {
		t.Fatalf("balance in reply %v, want 500", b)
	}
	again := s.call(http.MethodPut, "/v1/accounts/acct_1", map[string]string{"currency": "usd"}).want(t, http.StatusOK, "")
	if again.JSON["created"] != false || again.JSON["granted"] != false {
		t.Fatalf("second PUT: %s", again.Body)
	}
	s.call(http.MethodPut, "/v1/accounts/acct_1", map[string]string{"currency": "eur"}).want(t, http.StatusConflict, "currency_mismatch")

	s.wantMoney("acct_1", 500, 1) // one grant
}

func TestGetAccount(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct:get.1", "eur", 250)

	got := s.call(http.MethodGet, "/v1/accounts/acct:get.1", nil).want(t, http.StatusOK, "")
	acct := got.JSON["account"].(map[string]any)
	if acct["id"] != "acct:get.1" || acct["currency"] != "eur" || acct["balance"] != float64(250) {
		t.Fatalf("account %s", got.Body)
	}
	s.call(http.MethodGet, "/v1/accounts/nobody", nil).want(t, http.StatusNotFound, "account_not_found")
	s.call(http.MethodGet, "/v1/accounts/"+strings.Repeat("a", 65), nil).want(t, http.StatusBadRequest, "invalid_account_id")
	s.call(http.MethodGet, "/v1/accounts/a%20b", nil).want(t, http.StatusBadRequest, "invalid_account_id")
}

func TestPutAccountRefusesBadInput(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) { c.SignupGrant = 100 })
	cases := []struct {
		name, path string
		body       any
		status     int
		code       string
	}{
		{"missing currency", "/v1/accounts/a1", `{}`, 400, "invalid_currency"},
		{"upper-case currency", "/v1/accounts/a1", `{"currency":"USD"}`, 400, "invalid_currency"},
		{"short currency", "/v1/accounts/a1", `{"currency":"us"}`, 400, "invalid_currency"},
		{"currency of the wrong type", "/v1/accounts/a1", `{"currency":840}`, 400, "invalid_currency"},
		{"null currency", "/v1/accounts/a1", `{"currency":null}`, 400, "invalid_currency"},
		{"unknown field", "/v1/accounts/a1", `{"currency":"usd","balance":1000000}`, 400, "unknown_field"},
		{"empty body", "/v1/accounts/a1", ``, 400, "empty_body"},
		{"not JSON", "/v1/accounts/a1", `currency=usd`, 400, "invalid_json"},
		{"truncated JSON", "/v1/accounts/a1", `{"currency":"usd"`, 400, "invalid_json"},
		{"two values", "/v1/accounts/a1", `{"currency":"usd"}{}`, 400, "invalid_json"},
		{"array body", "/v1/accounts/a1", `["usd"]`, 400, "invalid_body"},
		{"oversized body", "/v1/accounts/a1", `{"currency":"usd","x":"` + strings.Repeat("x", 20<<10) + `"}`, 413, "body_too_large"},
		{"id too long", "/v1/accounts/" + strings.Repeat("a", 65), `{"currency":"usd"}`, 400, "invalid_account_id"},
		{"id with a slash-free bad character", "/v1/accounts/a!b", `{"currency":"usd"}`, 400, "invalid_account_id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s.in(t).call(http.MethodPut, c.path, c.body).want(t, c.status, c.code)
		})
	}
	if n := s.count(`SELECT count(*) FROM accounts`) + s.count(`SELECT count(*) FROM ledger`); n != 0 {
		t.Fatalf("bad input wrote %d rows", n)
	}
}

// TestAuthOnEveryV1Route: no route under /v1 answers without a configured key, in constant time.
func TestAuthOnEveryV1Route(t *testing.T) {
	t.Parallel()
	withKeys := newPatientServer(t)
	withoutKeys := newServer(t, func(c *config.Config) { c.APIKeys = nil })
	withKeys.createAccount("acct_auth", "usd", 0)

	v1 := []struct{ method, path, body string }{
		{http.MethodPut, "/v1/accounts/acct_auth", `{"currency":"usd"}`},
		{http.MethodGet, "/v1/accounts/acct_auth", ``},
		{http.MethodGet, "/v1/accounts/acct_auth/entries", ``},
		{http.MethodPost, "/v1/accounts/acct_auth/adjustments", `{"amount":100}`},
		{http.MethodPost, "/v1/accounts/acct_auth/topups", `{"amount":100,"success_url":"https://example.com/ok"}`},
		{http.MethodGet, "/v1/topups/top_1", ``},
		{http.MethodPost, "/v1/decisions", `[{"id":"d1","account_id":"acct_auth","cost":1}]`},
		{http.MethodGet, "/v1/stripe/events", ``},
	}
	for _, r := range v1 {
		t.Run(r.method+" "+r.path, func(t *testing.T) {
			withKeys, withoutKeys := withKeys.in(t), withoutKeys.in(t)
			withKeys.call(r.method, r.path, r.body, "Authorization", "", "Idempotency-Key", "k").want(t, 401, "missing_api_key")
			withKeys.call(r.method, r.path, r.body, "Authorization", "Basic "+testAPIKey, "Idempotency-Key", "k").want(t, 401, "missing_api_key")
			withKeys.call(r.method, r.path, r.body, "Authorization", "Bearer wrong", "Idempotency-Key", "k").want(t, 401, "invalid_api_key")
			withKeys.call(r.method, r.path, r.body, "Authorization", "Bearer "+testAPIKey+"x", "Idempotency-Key", "k").want(t, 401, "invalid_api_key")
			got := withoutKeys.call(r.method, r.path, r.body, "Idempotency-Key", "k").want(t, 401, "api_keys_not_configured")
			if !strings.Contains(string(got.Body), "ONCELEDGER_API_KEYS") {
				t.Fatalf("401 without keys does not say how to set them: %s", got.Body)
			}
		})
	}
	// Nothing an unauthenticated request asked for happened.
	if n := withKeys.count(`SELECT count(*) FROM ledger`) + withKeys.count(`SELECT count(*) FROM decisions`) +
		withKeys.count(`SELECT count(*) FROM topups`); n != 0 {
		t.Fatalf("unauthenticated requests wrote %d rows", n)
	}
	// Either configured key works.
	withKeys.call(http.MethodGet, "/v1/accounts/acct_auth", nil, "Authorization", "Bearer "+otherAPIKey).want(t, 200, "")
	withKeys.call(http.MethodGet, "/v1/accounts/acct_auth", nil, "Authorization", "bearer "+testAPIKey).want(t, 200, "")
}

// A member is created under its pool once; its parent never changes, and a parent that is missing, of
// another currency or a tree's third level is refused with nothing written (SPEC §18).
func TestPutAccountWithParent(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) { c.SignupGrant = 100 })
	put := func(id string, body map[string]string) reply {
		return s.call(http.MethodPut, "/v1/accounts/"+id, body)
	}
	put("org", map[string]string{"currency": "usd"}).want(t, http.StatusCreated, "")
	got := put("team", map[string]string{"currency": "usd", "parent_id": "org"}).want(t, http.StatusCreated, "")
	if p := got.JSON["account"].(map[string]any)["parent_id"]; p != "org" {
		t.Fatalf("team's parent %v: %s", p, got.Body)
	}
	put("member", map[string]string{"currency": "usd", "parent_id": "team"}).want(t, http.StatusCreated, "")
	put("member", map[string]string{"currency": "usd", "parent_id": "team"}).want(t, http.StatusOK, "")

	put("member", map[string]string{"currency": "usd", "parent_id": "org"}).want(t, http.StatusConflict, "parent_immutable")
	put("member", map[string]string{"currency": "usd"}).want(t, http.StatusConflict, "parent_immutable")
	put("org", map[string]string{"currency": "usd", "parent_id": "member"}).want(t, http.StatusConflict, "parent_immutable")
	put("orphan", map[string]string{"currency": "usd", "parent_id": "nobody"}).want(t, http.StatusNotFound, "parent_not_found")
	put("euro", map[string]string{"currency": "eur", "parent_id": "org"}).want(t, http.StatusConflict, "currency_mismatch")
	put("deep", map[string]string{"currency": "usd", "parent_id": "member"}).want(t, http.StatusConflict, "parent_too_deep")
	put("self", map[string]string{"currency": "usd", "parent_id": "self"}).want(t, http.StatusBadRequest, "invalid_parent_id")
	put("bad", map[string]string{"currency": "usd", "parent_id": "a b"}).want(t, http.StatusBadRequest, "invalid_parent_id")

	if n := s.count(`SELECT count(*) FROM accounts`); n != 3 {
		t.Fatalf("%d accounts, want 3", n)
	}
	if n := s.count(`SELECT count(*) FROM ledger`); n != 3 {
		t.Fatalf("%d entries, want the 3 grants", n)
	}
	got = s.call(http.MethodGet, "/v1/accounts/member", nil).want(t, http.StatusOK, "")
	if p := got.JSON["account"].(map[string]any)["parent_id"]; p != "team" {
		t.Fatalf("member's parent %v", p)
	}
}

// GET /v1/accounts/{id}/members: each child with its money and this month's spending, its own and drawn
// from the pool.
func TestPoolsMembersListsEachChildsSpending(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	ctx := context.Background()
	l := dbtest.Ledger(t, s.pool)
	for _, a := range [][3]string{{"org", "", "500"}, {"alice", "org", "40"}, {"bob", "org", "0"}} {
		grant, _ := strconv.ParseInt(a[2], 10, 64)
		if _, err := l.CreateMember(ctx, a[0], "gbp", a[1], grant); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.StoreDecisions(ctx, s.pool, []db.Decision{
		{ID: "d1", AccountID: "alice", Cost: 100, OccurredAt: time.Now()},
		{ID: "d2", AccountID: "bob", Cost: 30, OccurredAt: time.Now()},
	}); err != nil {
		t.Fatal(err)
	}
	billStored(t, s.pool)
	got := strings.TrimSpace(string(s.call(http.MethodGet, "/v1/accounts/org/members", nil).want(t, http.StatusOK, "").Body))
	want := `{"members":[` +
		`{"id":"alice","balance":0,"held":0,"available":0,"spent":{"own":40,"from_pool":60}},` +
		`{"id":"bob","balance":0,"held":0,"available":0,"spent":{"own":0,"from_pool":30}}]}`
	if got != want {
		t.Fatalf("members %s\nwant    %s", got, want)
	}
	if got := strings.TrimSpace(string(s.call(http.MethodGet, "/v1/accounts/alice/members", nil).want(t, http.StatusOK, "").Body)); got != `{"members":[]}` {
		t.Fatalf("alice's members %s", got)
	}
	s.call(http.MethodGet, "/v1/accounts/nobody/members", nil).want(t, http.StatusNotFound, "account_not_found")

	// The pool's statement names the member of each part it paid, with include=members.
	period := "from=2000-01-01T00:00:00Z&to=2100-01-01T00:00:00Z"
	statement := s.call(http.MethodGet, "/v1/accounts/org/statement?include=members&"+period, nil).want(t, http.StatusOK, "")
	var behalf []string
	for _, e := range statement.JSON["entries"].([]any) {
		entry := e.(map[string]any)
		if by, ok := entry["on_behalf_of"]; ok {
			behalf = append(behalf, fmt.Sprintf("%v:%v:%v", entry["dedupe_key"], entry["amount"], by))
		}
	}
	if want := "[decision:d1@org:-60:alice decision:d2@org:-30:bob]"; fmt.Sprint(behalf) != want {
		t.Fatalf("statement's parts %v, want %s", behalf, want)
	}
	csvBody := string(s.call(http.MethodGet, "/v1/accounts/org/statement?format=csv&include=members&"+period, nil).want(t, http.StatusOK, "").Body)
	if !strings.HasPrefix(csvBody, "seq,id,created_at,kind,amount,balance_after,dedupe_key,description,subject,feature,on_behalf_of\n") ||
		!strings.Contains(csvBody, ",decision:d1@org,decision d1 of alice,,,alice\n") {
		t.Fatalf("CSV statement:\n%s", csvBody)
	}
	plain := s.call(http.MethodGet, "/v1/accounts/org/statement?"+period, nil).want(t, http.StatusOK, "")
	if strings.Contains(string(plain.Body), "on_behalf_of") {
		t.Fatalf("a statement without include=members names members: %s", plain.Body)
	}
	s.call(http.MethodGet, "/v1/accounts/org/statement?include=everything&"+period, nil).want(t, http.StatusBadRequest, "invalid_include")
}

// A hold on a member past its own available reserves on its pools, shows what they reserved (pooled),
// and its capture answers each pool's part with the member's own; a replay answers the same entries
// (SPEC §18).
func TestPoolsHoldCaptureOnAMemberAnswersEachPoolsPart(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	ctx := context.Background()
	l := dbtest.Ledger(t, s.pool)
	for _, a := range [][3]string{{"org", "", "500"}, {"team", "org", "30"}, {"alice", "team", "20"}} {
		grant, _ := strconv.ParseInt(a[2], 10, 64)
		if _, err := l.CreateMember(ctx, a[0], "usd", a[1], grant); err != nil {
			t.Fatal(err)
		}
	}
	held := s.call(http.MethodPost, "/v1/accounts/alice/holds", `{"id":"h1","amount":100}`).want(t, http.StatusCreated, "")
	if hold := held.JSON["hold"].(map[string]any); hold["pooled"] != float64(80) {
		t.Fatalf("hold %v, want pooled 80: 30 of the team's, 50 of the organisation's", hold)
	}
	parts := func(r reply) string {
		t.Helper()
		out := []string{fmt.Sprintf("%v %v", r.JSON["entry"].(map[string]any)["dedupe_key"], r.JSON["entry"].(map[string]any)["amount"])}
		for _, p := range r.JSON["parts"].([]any) {
			e := p.(map[string]any)
			out = append(out, fmt.Sprintf("%v %v %v", e["dedupe_key"], e["amount"], e["on_behalf_of"]))
		}
		return strings.Join(out, " | ")
	}
	want := "hold:alice:h1 -20 | hold:alice:h1@team -30 alice | hold:alice:h1@org -40 alice"
	first := s.call(http.MethodPost, "/v1/accounts/alice/holds/h1/capture", `{"amount":90}`).want(t, http.StatusOK, "")
	if got := parts(first); got != want || first.JSON["posted"] != true {
		t.Fatalf("capture %s (posted %v), want %s", got, first.JSON["posted"], want)
	}
	again := s.call(http.MethodPost, "/v1/accounts/alice/holds/h1/capture", `{"amount":90}`).want(t, http.StatusOK, "")
	if got := parts(again); got != want || again.JSON["posted"] != false {
		t.Fatalf("replayed capture %s (posted %v), want %s", got, again.JSON["posted"], want)
	}
	root := s.call(http.MethodPost, "/v1/accounts/org/holds", `{"id":"h2","amount":10}`).want(t, http.StatusCreated, "")
	captured := s.call(http.MethodPost, "/v1/accounts/org/holds/h2/capture", nil).want(t, http.StatusOK, "")
	if root.JSON["hold"].(map[string]any)["pooled"] != float64(0) || len(captured.JSON["parts"].([]any)) != 0 {
		t.Fatalf("a root's hold %v, capture %v: nothing pooled, no parts", root.JSON, captured.JSON)
	}
}
