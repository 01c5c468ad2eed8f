package api

import (
	"net/http"
	"testing"
)

// PUT …/recharge refuses each bad guardrail with a 400 naming its field and writes nothing; GET
// …/recharge shows the settings, the status and the budget window.
func TestRechargeGuardrailsValidated(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	if r := s.call(http.MethodPut, "/v1/accounts/acct_guard", map[string]any{"currency": "usd"}); r.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	if _, err := s.pool.Exec(t.Context(), `UPDATE accounts SET stripe_customer = 'cus_g', payment_method = 'pm_g' WHERE id = 'acct_guard'`); err != nil {
		t.Fatal(err)
	}
	good := map[string]any{
		"threshold": 1000, "amount": 5000, "enabled": true, "cooldown": "1h",
		"budget": map[string]any{"amount": 20000, "count": 3, "period": "day"},
	}
	if r := s.call(http.MethodPut, "/v1/accounts/acct_guard/recharge", good); r.Status != http.StatusOK {
		t.Fatalf("good settings: %d %s", r.Status, r.Body)
	}
	with := func(key string, value any) map[string]any {
		out := map[string]any{}
		for k, v := range good {
			out[k] = v
		}
		out[key] = value
		return out
	}
	for _, c := range []struct {
		name string
		body any
		code string
	}{
		{"budget below one recharge", with("budget", map[string]any{"amount": 4999, "period": "day"}), "invalid_budget_amount"},
		{"budget without period", with("budget", map[string]any{"count": 3}), "invalid_budget_period"},
		{"budget period unknown", with("budget", map[string]any{"count": 3, "period": "year"}), "invalid_budget_period"},
		{"budget with nothing to cap", with("budget", map[string]any{"period": "week"}), "invalid_budget"},
		{"budget count zero", with("budget", map[string]any{"count": 0, "period": "week"}), "invalid_budget_count"},
		{"budget amount overflowing bigint", `{"threshold":1000,"amount":5000,"enabled":true,"budget":{"amount":9223372036854775808,"period":"day"}}`, "invalid_budget_amount"},
		{"cooldown beyond 30 days", with("cooldown", "721h"), "invalid_cooldown"},
		{"cooldown negative", with("cooldown", "-1s"), "invalid_cooldown"},
		{"cooldown not a duration", with("cooldown", "soon"), "invalid_cooldown"},
		{"mode unknown", with("mode", "max"), "invalid_mode"},
		{"target at the threshold", with("mode", "target"), "invalid_target"},
		{"target in fixed mode", with("target", 9000), "invalid_target"},
		{"negative amount", with("amount", -1), "invalid_amount"},
		{"amount overflowing bigint", `{"threshold":1000,"amount":99999999999999999999,"enabled":true}`, "invalid_amount"},
	} {
		r := s.call(http.MethodPut, "/v1/accounts/acct_guard/recharge", c.body)
		if r.Status != http.StatusBadRequest || r.code() != c.code {
			t.Errorf("%s: %d %s, want 400 %s", c.name, r.Status, r.Body, c.code)
		}
	}
	target := with("mode", "target")
	target["target"] = 999
	if r := s.call(http.MethodPut, "/v1/accounts/acct_guard/recharge", target); r.code() != "invalid_target" {
		t.Errorf("target below the threshold: %d %s", r.Status, r.Body)
	}

	r := s.call(http.MethodGet, "/v1/accounts/acct_guard/recharge", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("GET recharge: %d %s", r.Status, r.Body)
	}
	settings, _ := r.JSON["recharge"].(map[string]any)
	budget, _ := settings["budget"].(map[string]any)
	window, _ := r.JSON["window"].(map[string]any)
	if r.JSON["status"] != "ready" || settings["cooldown"] != "1h0m0s" || settings["mode"] != "fixed" ||
		budget["amount"] != float64(20000) || budget["count"] != float64(3) || budget["period"] != "day" ||
		window["attempts"] != float64(0) || window["recharged_amount"] != float64(0) {
		t.Fatalf("GET recharge after refused PUTs: %s", r.Body)
	}
	if r := s.call(http.MethodGet, "/v1/accounts/acct_nobody/recharge", nil); r.Status != http.StatusNotFound {
		t.Fatalf("unknown account: %d %s", r.Status, r.Body)
	}
}
