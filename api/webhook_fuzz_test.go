package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/config"
	"github.com/onceledger/onceledger/internal/stripefake"
)

const fuzzSecret = "whsec_test_fuzz"

// FuzzWebhookBody fuzzes what the webhook does with a body before it touches the database: the
// signature and JSON check (verifyStripeSignature), with the body signed as Stripe would sign it or not
// signed at all. It never panics; an unsigned body is never accepted, a signed one is accepted exactly
// when it is JSON, and every refusal is a 400 with a code. What the processor reads next is fuzzed by
// stripeevents' FuzzParseEvent; the whole webhook, database included, runs over this target's seeds in
// TestWebhookBodySeeds. Seeds: testdata/fuzz/FuzzWebhookBody.
func FuzzWebhookBody(f *testing.F) {
	secrets := []string{"whsec_test_other", fuzzSecret}
	f.Fuzz(func(t *testing.T, body []byte, signed bool) {
		header := ""
		if signed {
			header = stripefake.Sign(body, fuzzSecret, time.Now())
		}
		err := verifyStripeSignature(body, header, secrets)
		if err == nil {
			if !signed || !json.Valid(body) {
				t.Fatalf("accepted a body signed=%t, JSON=%t", signed, json.Valid(body))
			}
			return
		}
		var apiErr *Error
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || apiErr.Code == "" {
			t.Fatalf("refusal %v: want a 400 *Error with a code", err)
		}
		if signed && json.Valid(body) {
			t.Fatalf("refused a signed JSON body: %v", err)
		}
	})
}

// TestWebhookBodySeeds drives the whole webhook, database included, with every seed of
// FuzzWebhookBody, signed or not as the seed says: it never answers 500, only 200, 400, 413 or 503,
// always as JSON; and a refused delivery writes nothing.
func TestWebhookBodySeeds(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_1", "gbp", 0); err != nil {
		t.Fatal(err)
	}
	// No Stripe key: charge.refunded without a refund list parks instead of calling out.
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	handler := NewHandler(WiredDeps(pool, config.Config{WebhookSecrets: []string{fuzzSecret}}, log, db.LedgerConfig{}))
	rows := func() int {
		var n int
		err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM stripe_events) + (SELECT count(*) FROM ledger) + (SELECT count(*) FROM topups)`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	seeds := webhookSeeds(t)
	if len(seeds) == 0 {
		t.Fatal("no seeds in testdata/fuzz/FuzzWebhookBody")
	}
	for name, seed := range seeds {
		req := httptest.NewRequest(http.MethodPost, "/webhooks/stripe", bytes.NewReader(seed.body))
		if seed.signed {
			req.Header.Set("Stripe-Signature", stripefake.Sign(seed.body, fuzzSecret, time.Now()))
		}
		before := rows()
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)

		var reply struct {
			OK *bool `json:"ok"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &reply); err != nil || reply.OK == nil {
			t.Fatalf("%s: answered %d with a body that is not the webhook's JSON: %q", name, rec.Code, rec.Body)
		}
		switch rec.Code {
		case http.StatusOK:
			if !seed.signed {
				t.Fatalf("%s: an unsigned body was accepted: %s", name, rec.Body)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusServiceUnavailable:
			if after := rows(); after != before {
				t.Fatalf("%s: answered %d %s but wrote %d rows", name, rec.Code, rec.Body, after-before)
			}
		default:
			t.Fatalf("%s: answered %d %s; want 200, 400, 413 or 503", name, rec.Code, rec.Body)
		}
	}
}

type webhookSeed struct {
	body   []byte
	signed bool
}

// webhookSeeds reads FuzzWebhookBody's seed corpus, in the fuzzing engine's "go test fuzz v1" files:
// a []byte and a bool, one Go literal a line.
func webhookSeeds(t *testing.T) map[string]webhookSeed {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzWebhookBody", "*"))
	if err != nil {
		t.Fatal(err)
	}
	seeds := map[string]webhookSeed{}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
		if len(lines) != 3 || lines[0] != "go test fuzz v1" {
			t.Fatalf("%s is not a seed of (body []byte, signed bool)", file)
		}
		body, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			t.Fatalf("%s: body: %v", file, err)
		}
		signed, err := strconv.ParseBool(strings.TrimSuffix(strings.TrimPrefix(lines[2], "bool("), ")"))
		if err != nil {
			t.Fatalf("%s: signed: %v", file, err)
		}
		seeds[filepath.Base(file)] = webhookSeed{body: []byte(body), signed: signed}
	}
	return seeds
}
