package api

import (
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/access"
	"github.com/onceledger/onceledger/internal/audit"
)

// requireAPIKey returns the guard of the /v1 routes: a route given scope lets a request through only
// with `Authorization: Bearer <secret>` of a key that holds scope (or admin); another key is refused
// with 403 insufficient_scope. The check is a compare of the key's scope bits: a request let through
// allocates nothing for it. A wrong key is logged with the address it came from and counts in the
// throttle, which refuses with 429 the attempts of an address or key prefix that failed too often.
// Every refusal, and every request that may change something (all but GET), is recorded in the audit
// trail: a request that may change something carries its record pending in its context
// (db.PendingAudit), which the operation committing its effect writes in that transaction; what no
// transaction wrote (a refusal, a failure, a replay) is recorded after the handler.
func requireAPIKey(keys access.Keys, throttle *access.Throttle, trail audit.Recorder) func(scope access.Scope, next http.Handler) http.Handler {
	return func(scope access.Scope, next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key, err := authenticate(keys, throttle, trail.Log, r)
			if err == nil && !key.Scopes.Allows(scope) {
				err = &authError{Error: &Error{Status: http.StatusForbidden, Code: "insufficient_scope",
					Message: "key " + key.Name + " lacks the " + scope.String() + " scope this route needs"}}
			}
			if err != nil {
				switch err.Status {
				case http.StatusUnauthorized:
					w.Header().Set("WWW-Authenticate", `Bearer realm="onceledger"`)
				case http.StatusTooManyRequests:
					w.Header().Set("Retry-After", err.retryAfter)
				}
				writeJSON(w, err.Status, errorBody{Error: errorInfo{Code: err.Code, Message: err.Message}})
				name := ""
				if key != nil {
					name = key.Name
				}
				trail.Record(r, audit.Of(r, "", name, err.Status, err.Code))
				return
			}
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				next.ServeHTTP(w, r)
				return
			}
			rec := audit.Of(r, "", key.Name, http.StatusOK, "ok")
			ctx, pending := db.WithPendingAudit(r.Context(), rec)
			ow := &outcomeWriter{ResponseWriter: w}
			next.ServeHTTP(ow, r.WithContext(ctx))
			if pending.Written() {
				return
			}
			if ow.status == 0 {
				ow.status = http.StatusOK
			}
			rec.Status, rec.Outcome = ow.status, ow.outcome()
			if rec.Status < 400 && pending.Replayed() {
				rec.Outcome = "replay"
			}
			trail.Record(r, rec)
		})
	}
}

// authError is a refusal of the bearer check; retryAfter is a 429's Retry-After, in seconds.
type authError struct {
	*Error
	retryAfter string
}

func authenticate(keys access.Keys, throttle *access.Throttle, log *slog.Logger, r *http.Request) (*access.Key, *authError) {
	if len(keys) == 0 {
		return nil, unauthorized("api_keys_not_configured",
			"no API keys are configured: set ONCELEDGER_API_KEYS (comma-separated) to enable /v1")
	}
	// The scheme is case-insensitive (RFC 9110); the key is not.
	const scheme = "bearer "
	header := r.Header.Get("Authorization")
	if len(header) <= len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) {
		return nil, unauthorized("missing_api_key", "send the header Authorization: Bearer YOUR_KEY")
	}
	secret, addr := header[len(scheme):], audit.RemoteHost(r)
	if wait := throttle.Wait(addr, secret); wait > 0 {
		seconds := strconv.Itoa(int(wait.Seconds()) + 1)
		return nil, &authError{&Error{Status: http.StatusTooManyRequests, Code: "too_many_attempts",
			Message: "too many wrong keys from this address or with this key's first characters: retry after " + seconds + " s"}, seconds}
	}
	key := keys.Match(secret)
	if key == nil {
		throttle.Fail(addr, secret)
		log.WarnContext(r.Context(), "wrong API key", "remote", addr, "method", r.Method, "path", r.URL.Path)
		return nil, unauthorized("invalid_api_key", "the API key is not valid")
	}
	return key, nil
}

func unauthorized(code, message string) *authError {
	return &authError{Error: &Error{Status: http.StatusUnauthorized, Code: code, Message: message}}
}
