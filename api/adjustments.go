package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/onceledger/onceledger/db"
)

const (
	maxIdempotencyKey = 255
	maxDescription    = 1000
)

// adjustmentKey is the dedupe key of an operator adjustment (SPEC §3): the caller's Idempotency-Key,
// scoped to the account so that two accounts never share one.
func adjustmentKey(accountID, idempotencyKey string) string {
	return "api:" + accountID + ":" + idempotencyKey
}

// postAdjustment posts one adjustment with group commit (db.Ledger.PostGrouped): concurrent adjustments
// of one (hot) account share a transaction, and each caller still gets its own posting's answer, exactly
// as from its own transaction: New=false on an exact replay, db.ErrDedupeConflict,
// db.ErrInsufficientBalance, db.ErrAccountNotFound.
func postAdjustment(ctx context.Context, d Deps, p db.Posting) (db.Posted, error) {
	return d.Ledger.PostGrouped(ctx, p)
}

// handlePostAdjustment posts an operator adjustment once per Idempotency-Key. A replay with the same
// amount, description, subject and feature answers 200 with the original entry; anything different under
// the same key is 409 idempotency_conflict; a debit the balance does not cover is 409
// insufficient_balance, refused by the conditional balance update, not by an earlier read.
func handlePostAdjustment(d Deps) http.Handler {
	type request struct {
		Amount      *int64  `json:"amount"`
		Description *string `json:"description"`
		// The lot of a positive adjustment: promotional, priority 50, never expiring unless said.
		Category  *string    `json:"category"`
		Priority  *int       `json:"priority"`
		ExpiresAt *time.Time `json:"expires_at"`
		// Who and what the adjustment is for, stored on its entry (e.g. a credit back for one agent's run).
		Subject *string `json:"subject"`
		Feature *string `json:"feature"`
		// What was paid for a credit's lot (default: nothing), recognised as revenue as it is spent.
		CostAmount   *int64  `json:"cost_amount"`
		CostCurrency *string `json:"cost_currency"`
	}
	type response struct {
		Posted bool      `json:"posted"`
		Entry  entryJSON `json:"entry"`
	}
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		key, err := idempotencyKey(r)
		if err != nil {
			return err
		}
		var req request
		id, err := decodeAccountRequest(w, r, &req)
		if err != nil {
			return err
		}
		if req.Amount == nil || *req.Amount == 0 || *req.Amount > maxAmount || *req.Amount < -maxAmount {
			return badRequest("invalid_amount", "amount is required: a non-zero whole number of minor units, at most 10^15 either way")
		}
		description := ""
		if req.Description != nil {
			description = *req.Description
		}
		// PostgreSQL text cannot hold NUL.
		if utf8.RuneCountInString(description) > maxDescription || strings.ContainsRune(description, 0) {
			return badRequest("invalid_description", fmt.Sprintf("description must be at most %d characters, without NUL", maxDescription))
		}

		terms := db.LotTerms{Category: db.LotPromotional, Priority: db.DefaultLotPriority, ExpiresAt: req.ExpiresAt}
		if req.Category != nil {
			terms.Category = *req.Category
		}
		if req.Priority != nil {
			terms.Priority = *req.Priority
		}
		if terms.Category != db.LotPromotional && terms.Category != db.LotPaid {
			return badRequest("invalid_category", "category must be paid or promotional")
		}
		if terms.Priority < 0 || terms.Priority > 100 {
			return badRequest("invalid_priority", "priority must be a whole number from 0 to 100")
		}
		if *req.Amount < 0 && (req.Category != nil || req.Priority != nil || req.ExpiresAt != nil) {
			return badRequest("invalid_lot_terms", "category, priority and expires_at are for credits (a positive amount)")
		}
		cost, err := adjustmentCost(*req.Amount, terms.Category, req.CostAmount, req.CostCurrency)
		if err != nil {
			return err
		}
		posting := db.Posting{
			AccountID: id, Kind: db.KindAdjustment, Amount: *req.Amount, Description: description,
			DedupeKey: adjustmentKey(id, key), NoOverdraw: true, Cost: cost,
		}
		if posting.Subject, posting.Feature, err = spentBy(req.Subject, req.Feature); err != nil {
			return err
		}
		if *req.Amount > 0 {
			// The lot the credit makes travels with it (default: promotional, 50, never).
			posting.Lot = &terms
		}
		answersOnEffect(r, http.StatusCreated)
		posted, err := postAdjustment(r.Context(), d, posting)
		if err != nil {
			return err
		}
		if !posted.New {
			// The ledger compares account, kind and amount; the description, subject and feature are part
			// of the request too.
			if e := posted.Entry; e.Description != description || e.Subject != posting.Subject || e.Feature != posting.Feature {
				return fmt.Errorf("%w: Idempotency-Key %q was used with another description, subject or feature", db.ErrDedupeConflict, key)
			}
			prior, err := db.EntryLotCost(r.Context(), d.Pool, posted.Entry)
			if err != nil {
				return err
			}
			if !sameCost(prior, cost) {
				return fmt.Errorf("%w: Idempotency-Key %q was used with another cost", db.ErrDedupeConflict, key)
			}
			writeJSON(w, http.StatusOK, response{Posted: false, Entry: entryOut(posted.Entry)})
			return nil
		}
		writeJSON(w, http.StatusCreated, response{Posted: true, Entry: entryOut(posted.Entry)})
		return nil
	})
}

// adjustmentCost is the cost an adjustment names for its credit's lot: nil when it names none. Both
// fields go together, for a credit (a positive amount) of a paid lot; a promotional credit costs nothing.
func adjustmentCost(amount int64, category string, costAmount *int64, costCurrency *string) (*db.Cost, error) {
	if costAmount == nil && costCurrency == nil {
		return nil, nil
	}
	if amount < 0 {
		return nil, badRequest("invalid_cost_amount", "cost_amount and cost_currency are for credits (a positive amount)")
	}
	if costAmount == nil || *costAmount < 0 || *costAmount > maxAmount {
		return nil, badRequest("invalid_cost_amount", "cost_amount is required with cost_currency: a whole number of minor units from 0 to 10^15")
	}
	if costCurrency == nil || !currencyPattern.MatchString(*costCurrency) {
		return nil, badRequest("invalid_cost_currency", `cost_currency is required with cost_amount: a lower-case ISO 4217 code such as "usd"`)
	}
	if *costAmount > 0 && category != db.LotPaid {
		return nil, badRequest("invalid_cost_amount", `a credit that cost something is paid: cost_amount above 0 needs "category": "paid"`)
	}
	return &db.Cost{Amount: *costAmount, Currency: *costCurrency}, nil
}

// sameCost: two costs are the same, nil (nothing named) being a cost of nothing.
func sameCost(a, b *db.Cost) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func idempotencyKey(r *http.Request) (string, error) {
	values := r.Header.Values("Idempotency-Key")
	if len(values) == 0 || values[0] == "" {
		return "", badRequest("missing_idempotency_key", "the Idempotency-Key header is required")
	}
	key := values[0]
	if len(values) > 1 || len(key) > maxIdempotencyKey || !idempotencyKeyChars(key) {
		return "", badRequest("invalid_idempotency_key",
			fmt.Sprintf("Idempotency-Key must be one value of 1-%d printable ASCII characters other than ':'", maxIdempotencyKey))
	}
	return key, nil
}

// idempotencyKeyChars allows printable ASCII but ':'. Account ids may hold ':', so a key holding one
// could make api:{account}:{key} of one account equal another's ("a" + "b:c" vs "a:b" + "c").
func idempotencyKeyChars(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e || s[i] == ':' {
			return false
		}
	}
	return true
}
