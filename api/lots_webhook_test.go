package api_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db"
)

// Through the webhook: each top-up becomes a paid lot; a refund of the second payment takes its own
// lot first (the first lot, older, would come first in draw order); the refund's failure puts it back.
func TestLotsWebhookRefundTakesItsPaymentsLot(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.createAccount("acct_1", "gbp")
	s.deliver(topupEvent("evt_t1", "cs_1", "pi_1", "acct_1", 1000))
	s.deliver(topupEvent("evt_t2", "cs_2", "pi_2", "acct_1", 1000))
	remaining := func() string {
		lots, err := db.Lots(context.Background(), s.pool, "acct_1", true, 10)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range lots {
			out = append(out, fmt.Sprintf("%s:%d", l.Category, l.Remaining))
		}
		return fmt.Sprint(out)
	}
	if got := remaining(); got != "[paid:1000 paid:1000]" {
		t.Fatalf("after two top-ups: %s", got)
	}
	s.deliver(refundEvent("refund.created", "evt_r1", "re_1", "pi_2", 600, "succeeded"))
	if got := remaining(); got != "[paid:1000 paid:400]" {
		t.Fatalf("after refunding 600 of pi_2: %s, want pi_2's lot drawn", got)
	}
	s.deliver(refundEvent("refund.failed", "evt_r2", "re_1", "pi_2", 600, "failed"))
	if got := remaining(); got != "[paid:1000 paid:1000]" {
		t.Fatalf("after the refund failed: %s", got)
	}
	s.wantBalance("acct_1", 2000)
	violations, err := db.Verify(context.Background(), s.pool, time.Now(), time.Hour, time.Hour)
	if err != nil || len(violations) > 0 {
		t.Fatalf("verify: %v %v", violations, err)
	}
}
