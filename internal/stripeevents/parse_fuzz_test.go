package stripeevents

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/onceledger/onceledger/internal/stripefake"
)

// FuzzParseEvent feeds what the processor reads of a verified body, before any database work,
// arbitrary bytes: parseEvent, then the typed data.object that the event's effects start from, and the
// payment it names. Nothing panics; every refusal wraps ErrInvalidEvent (the webhook's 400, nothing
// written); an accepted event is one the database can store: an evt_ id, every id it names within
// maxIDLength, created between 2000 and 2100, UTF-8.
func FuzzParseEvent(f *testing.F) {
	for _, seed := range [][]byte{
		stripefake.Event("evt_1", "checkout.session.completed", "2024-06-20", map[string]any{
			"id": "cs_1", "object": "checkout.session", "payment_status": "paid", "amount_total": 1000, "currency": "gbp",
			"payment_intent": "pi_1", "customer": "cus_1", "metadata": map[string]any{"account_id": "acct_1"},
		}),
		stripefake.Event("evt_2", "charge.refunded", "2022-08-01", map[string]any{
			"id": "ch_1", "object": "charge", "payment_intent": map[string]any{"id": "pi_1", "metadata": map[string]any{}},
			"refunds": map[string]any{"has_more": false, "data": []any{map[string]any{"id": "re_1", "amount": 100, "status": "succeeded"}}},
		}),
		stripefake.Event("evt_3", "refund.created", "2024-06-20", map[string]any{"id": "re_2", "amount": 5, "charge": "ch_1"}),
		stripefake.Event("evt_4", "charge.dispute.created", "2024-06-20", map[string]any{
			"id": "du_1", "amount": 5, "status": "warning_needs_response", "payment_method_details": map[string]any{"card": map[string]any{"case_type": "inquiry"}},
		}),
		stripefake.Event("evt_5", "payment_intent.payment_failed", "2024-06-20", map[string]any{
			"id": "pi_2", "metadata": map[string]any{"topup_id": "rch_1"}, "last_payment_error": map[string]any{"code": "card_declined"},
		}),
		[]byte(`{"id":"evt_6","type":"x","created":946684800,"data":{"object":{"id":"\ud83d\ude00\u0000"}}}`),
		[]byte(`{"id":"evt_7","type":"x","created":4102444800,"data":{"object":{}}}`),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		ev, err := parseEvent(raw)
		if err != nil {
			if !errors.Is(err, ErrInvalidEvent) {
				t.Fatalf("refusal %v does not wrap ErrInvalidEvent", err)
			}
			return
		}
		if !strings.HasPrefix(ev.ID, "evt_") || len(ev.ID) > maxIDLength || len(ev.Type) > maxIDLength ||
			ev.Created < earliestCreated || ev.Created > latestCreated || !utf8.Valid(raw) {
			t.Fatalf("accepted an event the database cannot store: id %q, type %q, created %d", ev.ID, ev.Type, ev.Created)
		}
		if len(ev.paymentIntent()) > maxIDLength {
			t.Fatalf("accepted a payment_intent of %d characters", len(ev.paymentIntent()))
		}
		object := typedObject(ev.Type)
		if object == nil {
			return
		}
		if err := ev.object(object); err != nil {
			if !errors.Is(err, ErrInvalidEvent) {
				t.Fatalf("data.object refusal %v does not wrap ErrInvalidEvent", err)
			}
			return
		}
		for _, id := range object.ids() {
			if len(id) > maxIDLength {
				t.Fatalf("%s: accepted an id of %d characters", ev.Type, len(id))
			}
		}
		ev.onlyCharge()
		ev.needsRefundList()
	})
}

// typedObject is what effects decodes data.object of eventType into, nil for the types it reads no
// object of.
func typedObject(eventType string) identified {
	switch {
	case eventType == "checkout.session.completed", eventType == "checkout.session.async_payment_succeeded",
		eventType == "checkout.session.expired":
		return &checkoutSession{}
	case eventType == "charge.refunded":
		return &charge{}
	case slices.Contains(refundTypes, eventType):
		return &refund{}
	case slices.Contains(disputeTypes, eventType):
		return &dispute{}
	case slices.Contains(paymentIntentTypes, eventType):
		return &paymentIntentObject{}
	}
	return nil
}
