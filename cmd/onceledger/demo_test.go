package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stripe/stripe-go/v79"

	"github.com/onceledger/onceledger/config"
	"github.com/onceledger/onceledger/stripeapi"
)

// TestStripeStandInListsRefundsForStripeGo: the demo's stand-in answers the refund list the way
// stripe-go reads it, so the webhook sees exactly the refunds the demo says the charge has.
func TestStripeStandInListsRefundsForStripeGo(t *testing.T) {
	t.Parallel()
	standIn := newStripeStandIn()
	t.Cleanup(standIn.Close)
	a := payment{intent: "pi_t", charge: "ch_t"}
	standIn.setRefunds(a.charge, refund("re_1", a, 300, "succeeded"), refund("re_2", a, 200, "failed"))

	sc := stripeapi.New(config.Config{StripeSecretKey: "sk_test_x", StripeAPIBase: standIn.URL})
	params := &stripe.RefundListParams{Charge: stripe.String(a.charge)}
	var got []string
	it := sc.Refunds.List(params)
	for it.Next() {
		r := it.Refund()
		got = append(got, r.ID+":"+string(r.Status)+":"+r.PaymentIntent.ID)
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "re_1:succeeded:pi_t" || got[1] != "re_2:failed:pi_t" {
		t.Fatalf("refunds %v", got)
	}
	it = sc.Refunds.List(&stripe.RefundListParams{Charge: stripe.String("ch_other")})
	if it.Next() || it.Err() != nil {
		t.Fatalf("another charge lists refunds (err %v)", it.Err())
	}
}

// The demo itself, as `make demo` runs it: every step must end at the balance the guarantees require,
// billing included.
func TestDemoShowsEveryGuarantee(t *testing.T) {
	t.Parallel()
	stdout := &output{}
	vars := getenvFrom(map[string]string{"ONCELEDGER_DATA_DIR": filepath.Join("..", "..", ".data")})
	if err := run(context.Background(), []string{"demo"}, vars, stdout, &output{}); err != nil {
		t.Fatalf("demo: %v\n%s", err, stdout)
	}
	for _, want := range []string{"billed: balance 640 ✓", "balance 603 ✓", "Every step ended at the balance the guarantees require."} {
		if !strings.Contains(stdout.String(), want) {
			t.Fatalf("demo output lacks %q:\n%s", want, stdout)
		}
	}
}
