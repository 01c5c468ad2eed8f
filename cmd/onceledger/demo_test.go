package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onceledger/onceledger/db/dbtest"
)

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

// `demo --url` drives a server it did not start (here one started by the test, configured as `make
// run` configures it: no Stripe key, the reconciler running), reading the secret and key from the
// same variables; run twice, the second run starts from an account of its own.
func TestDemoDrivesARunningServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	vars := getenvFrom(map[string]string{
		"STRIPE_WEBHOOK_SECRET": "whsec_test_demo_url_onceledger_000000000", "ONCELEDGER_API_KEYS": "key_demo_url_onceledger_0000000000",
		"RECONCILE_INTERVAL": "1s",
	})
	base := startServe(t, map[string]string{
		"DATABASE_URL": dbtest.URL(t), "STRIPE_WEBHOOK_SECRET": "whsec_test_demo_url_onceledger_000000000",
		"ONCELEDGER_API_KEYS": "key_demo_url_onceledger_0000000000", "RECONCILE_INTERVAL": "1s",
	})
	for round := range 2 {
		stdout := &output{}
		if err := run(ctx, []string{"demo", "--url", base}, vars, stdout, &output{}); err != nil {
			t.Fatalf("demo --url (round %d): %v\n%s", round+1, err, stdout)
		}
		for _, want := range []string{"balance 700 ✓", "billed: balance 640 ✓", "Every step ended at the balance the guarantees require."} {
			if !strings.Contains(stdout.String(), want) {
				t.Fatalf("demo --url output lacks %q:\n%s", want, stdout)
			}
		}
	}
}
