package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/onceledger/onceledger/api"
	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/config"
)

// FuzzWebhookBody drives the whole webhook with arbitrary bodies, signed (as if Stripe sent them, to
// reach the parser and the effects) or not: it never panics and never answers 500, only 200, 400, 413
// or 503, always as JSON; and a refused delivery writes nothing. Seeds: testdata/fuzz/FuzzWebhookBody.
func FuzzWebhookBody(f *testing.F) {
	pool := dbtest.New(f)
	ctx := context.Background()
	if _, err := dbtest.Ledger(f, pool).CreateAccount(ctx, "acct_1", "gbp", 0); err != nil {
		f.Fatal(err)
	}
	// No Stripe key: charge.refunded without a refund list parks instead of calling out.
	handler := api.NewHandler(api.WiredDeps(pool, config.Config{WebhookSecrets: []string{testSecret}}, discardLog(), db.LedgerConfig{}))
	rows := func(t *testing.T) int {
		var n int
		err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM stripe_events) + (SELECT count(*) FROM ledger) + (SELECT count(*) FROM topups)`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	f.Fuzz(func(t *testing.T, body []byte, signed bool) {
		req := httptest.NewRequest(http.MethodPost, "/webhooks/stripe", bytes.NewReader(body))
		if signed {
			req.Header.Set("Stripe-Signature", sign(body, testSecret, time.Now()))
		}
		before := rows(t)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)

		var reply struct {
			OK *bool `json:"ok"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &reply); err != nil || reply.OK == nil {
			t.Fatalf("answered %d with a body that is not the webhook's JSON: %q", rec.Code, rec.Body)
		}
		switch rec.Code {
		case http.StatusOK:
			if !signed {
				t.Fatalf("an unsigned body was accepted: %s", rec.Body)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusServiceUnavailable:
			if after := rows(t); after != before {
				t.Fatalf("answered %d %s but wrote %d rows", rec.Code, rec.Body, after-before)
			}
		default:
			t.Fatalf("answered %d %s; want 200, 400, 413 or 503", rec.Code, rec.Body)
		}
	})
}
