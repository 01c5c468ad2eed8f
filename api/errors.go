package api

import (
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/stripeevents"
)

// errorBody is every error on the wire: {"ok":false,"error":{"code":"snake_case","message":"…"}}.
type errorBody struct {
	OK    bool      `json:"ok"`
	Error errorInfo `json:"error"`
}

type errorInfo struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// The hard limit that refused an authorisation (limit_exceeded only).
	*limitRefusalJSON
}

type limitRefusalJSON struct {
	LimitID     string    `json:"limit_id"`
	Period      string    `json:"period"`
	WindowStart time.Time `json:"window_start"`
	Remaining   int64     `json:"remaining"`
}

// Error is an error that already knows its HTTP status and code: bad input, mostly.
type Error struct {
	Status  int
	Code    string
	Message string
	// Cause, when set, is what went wrong in detail, for the log only: the answer carries Message.
	Cause error
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// badRequest is a 400 whose code names what was wrong (e.g. "invalid_amount").
func badRequest(code, message string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: code, Message: message}
}

// errStripeNotConfigured: STRIPE_SECRET_KEY is unset, so no Checkout Session can be created.
var errStripeNotConfigured = errors.New("stripe API not configured: set STRIPE_SECRET_KEY")

// errorTable is the one mapping from a domain error to its HTTP status and code. Errors not listed
// are unexpected: 500, logged with their detail, answered without it.
var errorTable = []struct {
	err    error
	status int
	code   string
}{
	{db.ErrNotFound, http.StatusNotFound, "not_found"},
	{db.ErrAccountNotFound, http.StatusNotFound, "account_not_found"},
	{db.ErrDedupeConflict, http.StatusConflict, "idempotency_conflict"},
	{db.ErrInsufficientBalance, http.StatusConflict, "insufficient_balance"},
	{db.ErrCurrencyMismatch, http.StatusConflict, "currency_mismatch"},
	{db.ErrParentNotFound, http.StatusNotFound, "parent_not_found"},
	{db.ErrParentImmutable, http.StatusConflict, "parent_immutable"},
	{db.ErrTreeTooDeep, http.StatusConflict, "parent_too_deep"},
	{db.ErrInvalidAmount, http.StatusBadRequest, "invalid_amount"},
	{db.ErrOutOfRange, http.StatusConflict, "amount_out_of_range"},
	{db.ErrHoldNotFound, http.StatusNotFound, "hold_not_found"},
	{db.ErrAmountExceedsHold, http.StatusBadRequest, "amount_exceeds_hold"},
	{db.ErrHoldCaptured, http.StatusConflict, "hold_captured"},
	{db.ErrHoldVoided, http.StatusConflict, "hold_voided"},
	{db.ErrHoldExpired, http.StatusConflict, "hold_expired"},
	{db.ErrPaymentMethodRequired, http.StatusConflict, "payment_method_required"},
	{db.ErrLotNotFound, http.StatusNotFound, "lot_not_found"},
	{db.ErrLimitExceeded, http.StatusConflict, "limit_exceeded"},
	{db.ErrLimitNotFound, http.StatusNotFound, "limit_not_found"},
	{db.ErrPeriodOpen, http.StatusBadRequest, "period_open"},
	{db.ErrPeriodOutOfOrder, http.StatusConflict, "period_out_of_order"},
	{db.ErrTransient, http.StatusServiceUnavailable, "unavailable"},
	{stripeevents.ErrInvalidEvent, http.StatusBadRequest, "invalid_event"},
	{stripeevents.ErrStripeUnavailable, http.StatusServiceUnavailable, "stripe_unavailable"},
	{errStripeNotConfigured, http.StatusServiceUnavailable, "stripe_not_configured"},
}

// handle adapts a handler that returns its error to http.Handler, answering the error through the
// one error table.
func handle(d Deps, fn func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := fn(w, r); err != nil {
			writeError(w, r, d.Log, err)
		}
	})
}

// writeError answers err with its status and code from errorTable.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var apiErr *Error
	if errors.As(err, &apiErr) {
		if apiErr.Cause != nil {
			log.InfoContext(r.Context(), "request refused", "method", r.Method, "path", r.URL.Path, "code", apiErr.Code, "err", apiErr.Cause)
		}
		writeJSON(w, apiErr.Status, errorBody{Error: errorInfo{Code: apiErr.Code, Message: apiErr.Message}})
		return
	}
	// A database error no layer mapped yet (e.g. a value out of range) still finds its sentinel.
	err = db.MapError(err)
	for _, e := range errorTable {
		if errors.Is(err, e.err) {
			if e.status >= 500 {
				log.WarnContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
			}
			info := errorInfo{Code: e.code, Message: e.err.Error()}
			if limit := (*db.LimitExceededError)(nil); errors.As(err, &limit) {
				info.limitRefusalJSON = &limitRefusalJSON{LimitID: limit.LimitID, Period: limit.Period, WindowStart: limit.WindowStart, Remaining: limit.Remaining}
			}
			writeJSON(w, e.status, errorBody{Error: info})
			return
		}
	}
	log.ErrorContext(r.Context(), "unexpected error", "method", r.Method, "path", r.URL.Path, "err", err)
	writeJSON(w, http.StatusInternalServerError, errorBody{Error: errorInfo{Code: "internal", Message: "internal error"}})
}

func handleNotFound() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusNotFound, errorBody{Error: errorInfo{Code: "route_not_found", Message: "no such route"}})
	})
}

// handleMethodNotAllowed answers a routed path asked with a method it does not take (the router has
// set the Allow header).
func handleMethodNotAllowed() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: errorInfo{Code: "method_not_allowed", Message: "method not allowed on this route"}})
	})
}
