package api

import (
	"net/http"
	"strings"

	"github.com/onceledger/onceledger/internal/access"
)

// requireAPIKey returns the guard of the /v1 routes: a route given scope lets a request through only
// with `Authorization: Bearer <secret>` of a key that holds scope (or admin); another key is refused
// with 403 insufficient_scope. The check is a compare of the key's scope bits: a request let through
// allocates nothing for it.
func requireAPIKey(keys access.Keys) func(scope access.Scope, next http.Handler) http.Handler {
	return func(scope access.Scope, next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key, err := authenticate(keys, r.Header.Get("Authorization"))
			if err == nil && !key.Scopes.Allows(scope) {
				err = &Error{Status: http.StatusForbidden, Code: "insufficient_scope",
					Message: "key " + key.Name + " lacks the " + scope.String() + " scope this route needs"}
			}
			if err != nil {
				if err.Status == http.StatusUnauthorized {
					w.Header().Set("WWW-Authenticate", `Bearer realm="onceledger"`)
				}
				writeJSON(w, err.Status, errorBody{Error: errorInfo{Code: err.Code, Message: err.Message}})
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func authenticate(keys access.Keys, header string) (*access.Key, *Error) {
	if len(keys) == 0 {
		return nil, unauthorized("api_keys_not_configured",
			"no API keys are configured: set ONCELEDGER_API_KEYS (comma-separated) to enable /v1")
	}
	// The scheme is case-insensitive (RFC 9110); the key is not.
	const scheme = "bearer "
	if len(header) <= len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) {
		return nil, unauthorized("missing_api_key", "send the header Authorization: Bearer YOUR_KEY")
	}
	key := keys.Match(header[len(scheme):])
	if key == nil {
		return nil, unauthorized("invalid_api_key", "the API key is not valid")
	}
	return key, nil
}

func unauthorized(code, message string) *Error {
	return &Error{Status: http.StatusUnauthorized, Code: code, Message: message}
}
