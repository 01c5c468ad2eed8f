package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/onceledger/onceledger/internal/reconcile"
	"github.com/onceledger/onceledger/internal/stripeevents"
	"github.com/onceledger/onceledger/internal/stripefake"
)

// The drift page lists open drift with the dry run of the parked event that would repair it and a link
// to that event's page: a paid session whose completion parked (its account did not exist) is a
// missing credit; its dry run parks again until the account exists, then shows the credit a replay
// would post, while nothing moves. Drift no stored event repairs (a refund never delivered, a credit
// of a payment Stripe does not hold) says how it is repaired instead.
func TestConsoleDriftPage(t *testing.T) {
	t.Parallel()
	s := newConsoleServer(t)
	fake := stripefake.New()
	t.Cleanup(fake.Close)
	at := time.Now().Add(-10 * time.Minute).Unix()
	fake.SetObjects("/v1/checkout/sessions", obj{
		"id": "cs_drift", "object": "checkout.session", "status": "complete", "payment_status": "paid", "amount_total": 2500,
		"currency": "gbp", "metadata": obj{"account_id": "acct_drift"}, "payment_intent": "pi_drift", "created": at,
	})
	fake.SetObjects("/v1/refunds", obj{
		"id": "re_drift", "object": "refund", "amount": 100, "currency": "gbp", "status": "succeeded",
		"payment_intent": "pi_paid", "created": at,
	})
	s.deliver(topupEvent("evt_drift_topup", "cs_drift", "pi_drift", "acct_drift", 2500))
	s.call(http.MethodPut, "/v1/accounts/acct_paid", `{"currency":"gbp"}`, "")
	s.deliver(topupEvent("evt_paid", "cs_paid", "pi_paid", "acct_paid", 900))
	s.wantOutcome("evt_drift_topup", "parked")

	r := reconcile.New(reconcile.Deps{Pool: s.pool, Stripe: stripeevents.NewStripeClient(stripefake.SecretKey, fake.URL, nil)}, reconcile.Options{})
	now := time.Now()
	if _, err := r.CheckStripe(context.Background(), now.Add(-time.Hour), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}

	c := newClient(t, s.url, &http.Client{})
	wantStatus(t, c.send(http.MethodGet, "/console/drift", nil), http.StatusSeeOther, "/console/login")
	token := c.csrfToken("/console/login")
	c.send(http.MethodPost, "/console/login", url.Values{"key": {apiKey}, "csrf_token": {token}})

	page := c.pageOK("/console/drift")
	for _, want := range []string{
		`id="drift-pi_drift"`, "missing_credit", `href="/console/events/evt_drift_topup"`,
		`<span class="reason dry-run-parked">unknown_account</span>`, "it would park again",
		`id="drift-re_drift"`, "missing_refund", "No event of it is stored",
		`id="drift-pi_paid"`, "unknown_payment", "No event repairs this",
	} {
		if !strings.Contains(page, want) {
			t.Fatalf("/console/drift lacks %q:\n%s", want, page)
		}
	}

	s.call(http.MethodPut, "/v1/accounts/acct_drift", `{"currency":"gbp"}`, "")
	page = c.pageOK("/console/drift")
	if !strings.Contains(page, `<td class="r credit">&#43;2,500</td>`) || !strings.Contains(page, "stripe:evt_drift_topup") {
		t.Fatalf("/console/drift does not show the credit a replay would post:\n%s", page)
	}
	s.wantMoney("acct_drift", 0, 0)
	s.wantOutcome("evt_drift_topup", "parked")
}

// pageOK returns the body of the page at path, which must answer 200.
func (c *client) pageOK(path string) string {
	c.t.Helper()
	status, body := c.page(path)
	if status != http.StatusOK {
		c.t.Fatalf("GET %s: %d\n%s", path, status, body)
	}
	return body
}
