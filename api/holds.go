package api

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"github.com/onceledger/onceledger/db"
)

// holdIDPattern is holds_id_format_check, checked here first so that bad input is a 400.
var holdIDPattern = idPattern{max: 128}

const (
	defaultHoldTTL = 15 * time.Minute
	minHoldTTL     = time.Second
	maxHoldTTL     = 168 * time.Hour
)

type holdJSON struct {
	ID             string     `json:"id"`
	AccountID      string     `json:"account_id"`
	Amount         int64      `json:"amount"`
	Status         string     `json:"status"`
	CapturedAmount *int64     `json:"captured_amount"`
	ExpiresAt      time.Time  `json:"expires_at"`
	CreatedAt      time.Time  `json:"created_at"`
	ResolvedAt     *time.Time `json:"resolved_at"`
	Subject        *string    `json:"subject"`
	Feature        *string    `json:"feature"`
	Pooled         int64      `json:"pooled"`
}

func holdOut(h db.Hold) holdJSON {
	out := holdJSON{
		ID: h.ID, AccountID: h.AccountID, Amount: h.Amount, Status: h.Status,
		ExpiresAt: h.ExpiresAt, CreatedAt: h.CreatedAt, ResolvedAt: h.ResolvedAt, Pooled: h.Pooled,
	}
	if h.Status == db.HoldCaptured {
		out.CapturedAmount = &h.CapturedAmount
	}
	if h.Subject != "" {
		out.Subject = &h.Subject
	}
	if h.Feature != "" {
		out.Feature = &h.Feature
	}
	return out
}

type holdResponse struct {
	Hold holdJSON `json:"hold"`
}

// holdRoute is the {id} and {hold_id} of an /v1/accounts/{id}/holds/{hold_id} route, checked.
func holdRoute(r *http.Request) (account, hold string, err error) {
	return accountRoute(r, "hold_id", holdIDPattern, "hold id must be 1-128 characters of [A-Za-z0-9_.:-]")
}

// accountRoute is the {id} and the {name} of an /v1/accounts/{id}/… route, checked: {name} against
// pattern, or 400 invalid_{name} with message.
func accountRoute(r *http.Request, name string, pattern idPattern, message string) (account, id string, err error) {
	if account, err = accountID(r); err != nil {
		return "", "", err
	}
	id = mux.Vars(r)[name]
	if !pattern.MatchString(id) {
		return "", "", badRequest("invalid_"+name, message)
	}
	return account, id, nil
}

// handlePostHold authorises a hold: 201 when this call reserved it; 200 with the stored hold (whatever
// its status now) on a replay of the same id and amount; 409 idempotency_conflict for the same id with
// another amount; 409 insufficient_balance when the available balance (balance - held) does not cover
// it, with a member's pools' (docs/pools.md), 409 limit_exceeded when a hard spend limit's window cannot
// take it, refused by the conditional reservation, not an earlier read, and then nothing is kept.
// Concurrent authorisations of one tree of accounts share a transaction
// (db.Ledger.AuthoriseHoldGrouped), with the same answers.
func handlePostHold(d Deps) http.Handler {
	type request struct {
		ID        *string `json:"id"`
		Amount    *int64  `json:"amount"`
		ExpiresIn *string `json:"expires_in"`
		Subject   *string `json:"subject"`
		Feature   *string `json:"feature"`
	}
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		var req request
		id, err := decodeAccountRequest(w, r, &req)
		if err != nil {
			return err
		}
		if req.ID == nil || !holdIDPattern.MatchString(*req.ID) {
			return badRequest("invalid_id", "id is required: 1-128 characters of [A-Za-z0-9_.:-], chosen by the caller")
		}
		if req.Amount == nil || *req.Amount <= 0 || *req.Amount > maxAmount {
			return badRequest("invalid_amount", "amount is required: a positive whole number of minor units, at most 10^15")
		}
		ttl := defaultHoldTTL
		if req.ExpiresIn != nil {
			ttl, err = time.ParseDuration(*req.ExpiresIn)
			if err != nil || ttl < minHoldTTL || ttl > maxHoldTTL {
				return badRequest("invalid_expires_in", `expires_in must be a Go duration from "1s" to "168h", such as "15m"`)
			}
		}
		hold := db.HoldRequest{ID: *req.ID, Amount: *req.Amount, ExpiresIn: ttl}
		if hold.Subject, hold.Feature, err = spentBy(req.Subject, req.Feature); err != nil {
			return err
		}
		answersOnEffect(r, http.StatusCreated)
		out, err := d.Ledger.AuthoriseHoldGrouped(r.Context(), id, hold)
		if err != nil {
			return err
		}
		status := http.StatusOK
		if out.Created {
			status = http.StatusCreated
		}
		writeJSON(w, status, holdResponse{Hold: holdOut(out.Hold)})
		return nil
	})
}

func handleGetHold(d Deps) http.Handler {
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		accountID, holdID, err := holdRoute(r)
		if err != nil {
			return err
		}
		hold, err := db.GetHold(r.Context(), d.Pool, accountID, holdID)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, holdResponse{Hold: holdOut(hold)})
		return nil
	})
}

// handleCaptureHold captures the hold for amount (all of it when absent), posting a usage entry keyed
// hold:{account_id}:{hold_id} in the transaction that moves the hold out of held. A replay with the
// same amount answers 200 posted:false with the original entry; another amount is 409
// idempotency_conflict; above the hold 400 amount_exceeds_hold; a hold no longer held 409 hold_voided,
// hold_expired or hold_captured (captured by its decision).
func handleCaptureHold(d Deps) http.Handler {
	type request struct {
		Amount *int64 `json:"amount"`
	}
	type response struct {
		Hold   holdJSON    `json:"hold"`
		Posted bool        `json:"posted"`
		Entry  entryJSON   `json:"entry"`
		Parts  []entryJSON `json:"parts"`
	}
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		accountID, holdID, err := holdRoute(r)
		if err != nil {
			return err
		}
		var req request
		if err := decodeOptionalJSON(w, r, &req); err != nil {
			return err
		}
		var amount int64 // zero: all of it
		if req.Amount != nil {
			if *req.Amount <= 0 || *req.Amount > maxAmount {
				return badRequest("invalid_amount", "amount must be a positive whole number of minor units, at most 10^15")
			}
			amount = *req.Amount
		}
		out, err := d.Ledger.CaptureHold(r.Context(), accountID, holdID, amount)
		if err != nil {
			return err
		}
		parts := make([]entryJSON, len(out.Parts))
		for i, e := range out.Parts {
			parts[i] = entryOut(e)
			parts[i].OnBehalfOf = e.OnBehalfOf
		}
		writeJSON(w, http.StatusOK, response{Hold: holdOut(out.Hold), Posted: out.Posted, Entry: entryOut(out.Entry), Parts: parts})
		return nil
	})
}

// handleVoidHold releases the hold: 200 with the voided hold, also on a replay; 409 hold_captured or
// hold_expired when it was resolved otherwise.
func handleVoidHold(d Deps) http.Handler {
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		accountID, holdID, err := holdRoute(r)
		if err != nil {
			return err
		}
		if err := decodeOptionalJSON(w, r, &struct{}{}); err != nil {
			return err
		}
		hold, err := db.VoidHold(r.Context(), d.Pool, accountID, holdID)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, holdResponse{Hold: holdOut(hold)})
		return nil
	})
}

// decodeOptionalJSON is decodeJSON for bodies that may be left out entirely.
func decodeOptionalJSON(w http.ResponseWriter, r *http.Request, dst any) error {
	err := decodeJSON(w, r, smallBody, dst)
	var apiErr *Error
	if errors.As(err, &apiErr) && apiErr.Code == "empty_body" {
		return nil
	}
	if err != nil {
		return fmt.Errorf("decode body: %w", err)
	}
	return nil
}
