package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/onceledger/onceledger/api"
	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

// A refund of a member's top-up takes back from the member, whose payment it was, never from its pool,
// even when the member has spent that top-up and the refund takes it below zero (SPEC §18: refunds do not
// cascade).
func TestPoolsRefundOfAMembersTopupNeverTouchesThePool(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	ctx := context.Background()
	l := dbtest.Ledger(t, s.pool)
	s.createAccount("org", "gbp")
	if _, err := l.CreateMember(ctx, "member", "gbp", "org", 0); err != nil {
		t.Fatal(err)
	}
	s.deliver(topupEvent("evt_org", "cs_org", "pi_org", "org", 1000))
	s.deliver(topupEvent("evt_m", "cs_m", "pi_m", "member", 300))
	if _, err := db.StoreDecisions(ctx, s.pool, []db.Decision{{ID: "d1", AccountID: "member", Cost: 250, OccurredAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	api.BillStored(t, s.pool)
	s.wantBalance("member", 50)
	s.wantBalance("org", 1000)

	s.deliver(refundEvent("refund.created", "evt_r1", "re_1", "pi_m", 300, "succeeded"))
	s.wantBalance("member", -250)
	s.wantBalance("org", 1000)
	if got := s.entries("org"); len(got) != 1 {
		t.Fatalf("org's entries %v, want its top-up alone", got)
	}
	violations, err := db.Verify(ctx, s.pool, time.Now(), time.Hour, time.Hour)
	if err != nil || len(violations) > 0 {
		t.Fatalf("verify: %v %v", violations, err)
	}
}
