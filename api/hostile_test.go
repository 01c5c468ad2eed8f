package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// Text that looks like SQL, dollar quotes, quotes, backslashes and non-ASCII, in every text field an
// event carries (event, session, payment, refund ids; metadata; descriptions built from them), is
// stored verbatim, and every table is still there.
func TestWebhookStoresHostileTextVerbatim(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	s.createAccount("acct_1", "gbp")
	const (
		eventID  = `evt_'; DROP TABLE ledger; -- $$ é☃`
		session  = `cs_'); DELETE FROM topups; --`
		payment  = `pi_$$'"\ $body$`
		refundID = `re_'; TRUNCATE ledger; -- ü`
		note     = `'; DROP TABLE accounts; -- $tag$ "\u0000" \ 😀`
	)
	topup := sessionObject(session, payment, "acct_1", 1000)
	topup["metadata"] = obj{"account_id": "acct_1", "note": note}
	if r := s.deliver(eventJSON(eventID, "checkout.session.completed", apiVersion, topup)); !r.Credited || r.Event != eventID {
		t.Fatalf("top-up answered %+v", r)
	}
	if r := s.deliver(refundEvent("refund.created", `evt_"; --`, refundID, payment, 300, "succeeded")); r.Reversed != 1 {
		t.Fatalf("refund answered %+v", r)
	}
	// Escapes as Stripe may write them: a surrogate pair (an emoji) and an escaped backslash before
	// u0000, which is text, not NUL.
	raw := []byte(`{"id":"evt_escapes","object":"event","type":"customer.created","api_version":"2024-06-20",
		"created":1700000000,"livemode":false,"data":{"object":{"id":"cus_1","name":"\ud83d\ude00 \\u0000"}}}`)
	if r := s.deliver(raw); r.Event != "evt_escapes" {
		t.Fatalf("escaped event answered %+v", r)
	}

	ctx := context.Background()
	var storedNote, storedName string
	if err := s.pool.QueryRow(ctx, `SELECT payload->'data'->'object'->'metadata'->>'note' FROM stripe_events WHERE event_id = $1`, eventID).Scan(&storedNote); err != nil {
		t.Fatal(err)
	}
	if storedNote != note {
		t.Errorf("metadata stored as %q, want %q", storedNote, note)
	}
	if err := s.pool.QueryRow(ctx, `SELECT payload->'data'->'object'->>'name' FROM stripe_events WHERE event_id = 'evt_escapes'`).Scan(&storedName); err != nil {
		t.Fatal(err)
	}
	if want := "😀 \\u0000"; storedName != want {
		t.Errorf("escaped name stored as %q, want %q", storedName, want)
	}
	for key, description := range map[string]string{
		"stripe:" + eventID:         "Stripe Checkout " + session,
		"stripe:refund:" + refundID: "Stripe refund " + refundID,
	} {
		var gotDescription, gotPayment string
		err := s.pool.QueryRow(ctx, `SELECT description, payment_intent FROM ledger WHERE dedupe_key = $1`, key).Scan(&gotDescription, &gotPayment)
		if err != nil {
			t.Errorf("entry %q: %v", key, err)
			continue
		}
		if gotDescription != description || gotPayment != payment {
			t.Errorf("entry %q stored description %q, payment %q", key, gotDescription, gotPayment)
		}
	}
	if n := s.count(`SELECT count(*) FROM topups WHERE id = $1 AND session_id = $1 AND payment_intent = $2 AND paid_event_id = $3`, session, payment, eventID); n != 1 {
		t.Errorf("the order of session %q was not stored verbatim", session)
	}
	for _, table := range []string{"accounts", "ledger", "topups", "stripe_events"} {
		if n := s.count(`SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename = $1`, table); n != 1 {
			t.Errorf("table %s is gone", table)
		}
	}
	s.wantBalance("acct_1", 700)
}

// Signed JSON that encoding/json reads but PostgreSQL's jsonb cannot store is refused as an invalid
// event (400, nothing written), not a failed insert (500) that Stripe would retry for days.
func TestWebhookRefusesEventsPostgreSQLCannotStore(t *testing.T) {
	t.Parallel()
	s := newWebhookServer(t)
	for name, id := range map[string]string{
		"NUL escape":               `"cus_\u0000"`,
		"lone high surrogate":      `"cus_\ud83d"`,
		"lone low surrogate":       `"cus_\ude00"`,
		"high then another escape": `"cus_\ud83d\n"`,
		"two highs":                `"cus_\ud83d\ud83d\ude00"`,
		"not UTF-8":                "\"cus_\xff\xfe\"",
	} {
		body := []byte(`{"id":"evt_bad","object":"event","type":"customer.created","api_version":"2024-06-20",
			"created":1700000000,"livemode":false,"data":{"object":{"id":` + id + `}}}`)
		r := s.post(body, sign(body, testSecret, time.Now()))
		if r.status != http.StatusBadRequest || r.Error.Code != "invalid_event" {
			t.Errorf("%s: answered %d %s, want 400 invalid_event", name, r.status, r.raw)
		}
	}
	if n := s.rowsWritten(); n != 0 {
		t.Fatalf("%d rows written by refused events", n)
	}
}
