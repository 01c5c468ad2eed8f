package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/onceledger/onceledger/db"
)

// The formats spend_limits' checks hold, checked here first so that bad input is a 400.
var (
	limitIDPattern = idPattern{max: 64}
	subjectPattern = idPattern{max: 128, at: true}
	featurePattern = idPattern{max: 64}
)

// spentBy reads the optional subject and feature of a request that spends (a hold, an adjustment): each
// absent is empty, each present must match its format, else 400 invalid_subject or invalid_feature.
func spentBy(subject, feature *string) (string, string, error) {
	var s, f string
	if subject != nil {
		if !subjectPattern.MatchString(*subject) {
			return "", "", badRequest("invalid_subject", "subject must be 1-128 characters of [A-Za-z0-9_.:@-]")
		}
		s = *subject
	}
	if feature != nil {
		if !featurePattern.MatchString(*feature) {
			return "", "", badRequest("invalid_feature", "feature must be 1-64 characters of [A-Za-z0-9_.:-]")
		}
		f = *feature
	}
	return s, f, nil
}

type limitJSON struct {
	ID          string    `json:"id"`
	Scope       string    `json:"scope"`
	ScopeValue  *string   `json:"scope_value"`
	Period      string    `json:"period"`
	Amount      int64     `json:"amount"`
	Mode        string    `json:"mode"`
	CreatedAt   time.Time `json:"created_at"`
	WindowStart time.Time `json:"window_start"`
	WindowEnd   time.Time `json:"window_end"`
	Spent       int64     `json:"spent"`
	Held        int64     `json:"held"`
	Over        int64     `json:"over"`
	Remaining   int64     `json:"remaining"`
}

func limitOut(l db.Limit) limitJSON {
	out := limitJSON{
		ID: l.ID, Scope: l.Scope, Period: l.Period, Amount: l.Amount, Mode: l.Mode, CreatedAt: l.CreatedAt,
		WindowStart: l.WindowStart, WindowEnd: l.WindowEnd, Spent: l.Spent, Held: l.Held, Over: l.Over, Remaining: l.Remaining(),
	}
	if l.ScopeValue != "" {
		out.ScopeValue = &l.ScopeValue
	}
	return out
}

type limitsResponse struct {
	Limits []limitJSON `json:"limits"`
}

// limitRoute is the {id} and {limit_id} of an /v1/accounts/{id}/limits/{limit_id} route, checked.
func limitRoute(r *http.Request) (account, limit string, err error) {
	return accountRoute(r, "limit_id", limitIDPattern, "limit id must be 1-64 characters of [A-Za-z0-9_.:-]")
}

// handlePutLimit creates or replaces a spend limit (what its windows counted stays) and answers the
// account's limits with their current windows. Bad input is a 400 naming the field, nothing written.
func handlePutLimit(d Deps) http.Handler {
	type request struct {
		Scope      *string `json:"scope"`
		ScopeValue *string `json:"scope_value"`
		Period     *string `json:"period"`
		Amount     *int64  `json:"amount"`
		Mode       *string `json:"mode"`
	}
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		accountID, limitID, err := limitRoute(r)
		if err != nil {
			return err
		}
		var req request
		if err := decodeJSON(w, r, smallBody, &req); err != nil {
			return fmt.Errorf("decode body: %w", err)
		}
		def, err := checkLimit(req.Scope, req.ScopeValue, req.Period, req.Amount, req.Mode)
		if err != nil {
			return err
		}
		if err := db.PutLimit(r.Context(), d.Pool, accountID, limitID, def); err != nil {
			return err
		}
		return writeLimits(w, r, d, accountID)
	})
}

// checkLimit refuses a limit definition with any bad field, naming it.
func checkLimit(scope, value, period *string, amount *int64, mode *string) (db.LimitDefinition, error) {
	var def db.LimitDefinition
	if scope == nil {
		return def, badRequest("invalid_scope", "scope is required: account, subject or feature")
	}
	def.Scope = *scope
	switch def.Scope {
	case db.ScopeAccount:
		if value != nil {
			return def, badRequest("invalid_scope_value", "scope_value must be left out for an account limit")
		}
	case db.ScopeSubject:
		if value == nil || !subjectPattern.MatchString(*value) {
			return def, badRequest("invalid_scope_value", "scope_value is required for a subject limit: 1-128 characters of [A-Za-z0-9_.:@-]")
		}
	case db.ScopeFeature:
		if value == nil || !featurePattern.MatchString(*value) {
			return def, badRequest("invalid_scope_value", "scope_value is required for a feature limit: 1-64 characters of [A-Za-z0-9_.:-]")
		}
	default:
		return def, badRequest("invalid_scope", "scope must be account, subject or feature")
	}
	if value != nil {
		def.ScopeValue = *value
	}
	if period == nil || (*period != "day" && *period != "week" && *period != "month") {
		return def, badRequest("invalid_period", "period is required: day, week or month (calendar windows in UTC)")
	}
	def.Period = *period
	if amount == nil || *amount <= 0 || *amount > maxAmount {
		return def, badRequest("invalid_amount", "amount is required: a positive whole number of minor units, at most 10^15")
	}
	def.Amount = *amount
	if mode == nil || (*mode != db.LimitHard && *mode != db.LimitSoft) {
		return def, badRequest("invalid_mode", "mode is required: hard or soft")
	}
	def.Mode = *mode
	return def, nil
}

// handleDeleteLimit deletes a spend limit and its windows: 204, or 404 limit_not_found.
func handleDeleteLimit(d Deps) http.Handler {
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		accountID, limitID, err := limitRoute(r)
		if err != nil {
			return err
		}
		answersOnEffect(r, http.StatusNoContent)
		if err := db.DeleteLimit(r.Context(), d.Pool, accountID, limitID); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

// handleGetLimits answers the account's limits, each with its current window.
func handleGetLimits(d Deps) http.Handler {
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		accountID, err := accountID(r)
		if err != nil {
			return err
		}
		return writeLimits(w, r, d, accountID)
	})
}

func writeLimits(w http.ResponseWriter, r *http.Request, d Deps, accountID string) error {
	limits, err := db.Limits(r.Context(), d.Pool, accountID)
	if err != nil {
		return err
	}
	out := limitsResponse{Limits: make([]limitJSON, len(limits))}
	for i, l := range limits {
		out.Limits[i] = limitOut(l)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
