package stripeevents

import (
	"testing"

	"github.com/onceledger/onceledger/db"
)

// Refund status → effect: a refund that is or may still be paid out takes the money back; one that
// failed or was canceled takes it back and restores it, under a second key, so a late "created" event
// finds both keys taken. Any other status moves nothing.
func TestRefundReversals(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status      string
		reversal    bool
		withRestore bool
	}{
		{"pending", true, false},
		{"requires_action", true, false},
		{"succeeded", true, false},
		{"failed", true, true},
		{"canceled", true, true},
		{"", false, false},
		{"some_future_status", false, false},
	}
	for _, c := range cases {
		t.Run(c.status, func(t *testing.T) {
			t.Parallel()
			got := refundReversals([]refund{{ID: "re_1", Amount: 300, Currency: "usd", Status: c.status}})
			if !c.reversal {
				if len(got) != 0 {
					t.Fatalf("status %q: %+v, want nothing", c.status, got)
				}
				return
			}
			want := reversal{
				kind: db.KindRefund, key: "stripe:refund:re_1",
				restoreKind: db.KindRefundRestore, restoreKey: "stripe:refund-failed:re_1",
				amount: 300, currency: "usd", undone: c.withRestore, description: "Stripe refund re_1",
			}
			if len(got) != 1 || got[0] != want {
				t.Fatalf("status %q: %+v, want %+v", c.status, got, want)
			}
		})
	}
}

// A refund without an id or a positive amount cannot be keyed or posted: it is skipped, the others
// of the list are kept.
func TestRefundReversalsSkipUnkeyable(t *testing.T) {
	t.Parallel()
	got := refundReversals([]refund{
		{ID: "", Amount: 100, Status: "succeeded"},
		{ID: "re_zero", Amount: 0, Status: "succeeded"},
		{ID: "re_ok", Amount: 50, Status: "succeeded"},
	})
	if len(got) != 1 || got[0].key != "stripe:refund:re_ok" || got[0].amount != 50 {
		t.Fatalf("%+v, want only re_ok", got)
	}
}

// Dispute state → effect: inquiries move nothing; a chargeback withdraws the funds; a won one (or
// funds reinstated) withdraws and restores them, each under its own key.
func TestDisputeReversal(t *testing.T) {
	t.Parallel()
	const (
		none     = iota // no effect
		withdraw        // dispute entry
		restore         // dispute and dispute_won entries
	)
	cases := []struct {
		eventType, status, caseType string
		want                        int
	}{
		{"charge.dispute.created", "warning_needs_response", "inquiry", none},
		{"charge.dispute.updated", "warning_under_review", "inquiry", none},
		{"charge.dispute.closed", "warning_closed", "inquiry", none},
		{"charge.dispute.created", "needs_response", "inquiry", none},
		{"charge.dispute.created", "needs_response", "chargeback", withdraw},
		{"charge.dispute.updated", "under_review", "chargeback", withdraw},
		{"charge.dispute.closed", "lost", "chargeback", withdraw},
		{"charge.dispute.funds_withdrawn", "needs_response", "chargeback", withdraw},
		// Stripe says funds moved: only an escalated inquiry does that.
		{"charge.dispute.funds_withdrawn", "needs_response", "inquiry", withdraw},
		{"charge.dispute.closed", "won", "chargeback", restore},
		{"charge.dispute.updated", "won", "", restore},
		{"charge.dispute.funds_reinstated", "won", "chargeback", restore},
		{"charge.dispute.funds_reinstated", "under_review", "chargeback", restore},
		{"charge.dispute.updated", "charge_refunded", "chargeback", none},
	}
	for _, c := range cases {
		t.Run(c.eventType+"/"+c.status+"/"+c.caseType, func(t *testing.T) {
			t.Parallel()
			d := dispute{ID: "dp_1", Amount: 400, Currency: "gbp", Status: c.status}
			d.PaymentMethodDetails.Card.CaseType = c.caseType
			got, ok := disputeReversal(c.eventType, d)
			if c.want == none {
				if ok {
					t.Fatalf("%+v, want no effect", got)
				}
				return
			}
			want := reversal{
				kind: db.KindDispute, key: "stripe:dispute:dp_1",
				restoreKind: db.KindDisputeWon, restoreKey: "stripe:dispute-won:dp_1",
				amount: 400, currency: "gbp", undone: c.want == restore, description: "Stripe dispute dp_1",
			}
			if !ok || got != want {
				t.Fatalf("%+v (ok=%v), want %+v", got, ok, want)
			}
		})
	}
}

// A dispute without an id or a positive amount moves nothing, whatever its state.
func TestDisputeReversalNeedsIDAndAmount(t *testing.T) {
	t.Parallel()
	for _, d := range []dispute{{ID: "", Amount: 400, Status: "lost"}, {ID: "dp_0", Amount: 0, Status: "lost"}} {
		if got, ok := disputeReversal("charge.dispute.closed", d); ok {
			t.Errorf("%+v moved %+v", d, got)
		}
	}
}

// storable refuses exactly what encoding/json reads but PostgreSQL's jsonb cannot store.
func TestStorable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, raw string
		ok        bool
	}{
		// Stored as they are.
		{"plain", `{"a":"b"}`, true},
		{"UTF-8 text", `{"a":"café ✓ 😀"}`, true},

		{"escaped letter", `{"a":"\u0041"}`, true},
		{"surrogate pair", `{"a":"\ud83d\ude00"}`, true},
		{"escaped backslash before u0000", `{"a":"\\u0000"}`, true},
		{"other escapes", `{"a":"\n\t\"\/"}`, true},

		// Refused.
		{"not UTF-8", "{\"a\":\"\xff\xfe\"}", false},
		{"NUL escape", `{"a":"x\u0000y"}`, false},
		{"lone high surrogate", `{"a":"\ud83d"}`, false},
		{"lone low surrogate", `{"a":"\ude00"}`, false},

		{"high surrogate then a letter", `{"a":"\ud83dx"}`, false},
		{"high surrogate then another escape", `{"a":"\ud83d\n"}`, false},
		{"high surrogate then a non-surrogate escape", `{"a":"\ud83d\u0041"}`, false},
		{"two high surrogates", `{"a":"\ud83d\ud83d\ude00"}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if err := storable([]byte(c.raw)); (err == nil) != c.ok {
				t.Fatalf("storable(%s) = %v, want ok=%v", c.raw, err, c.ok)
			}
		})
	}
}
