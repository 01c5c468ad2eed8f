package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// requireAPIKey lets a request through only with `Authorization: Bearer <key>` for one of keys.
// Every key is compared, in constant time, on SHA-256 digests (equal lengths), so neither the
// position nor the length of a configured key leaks through timing.
func requireAPIKey(keys []string) func(http.Handler) http.Handler {
	digests := make([][sha256.Size]byte, len(keys))
	for i, k := range keys {
		digests[i] = sha256.Sum256([]byte(k))
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := authenticate(digests, r.Header.Get("Authorization")); err != nil {
				w.Header().Set("WWW-Authenticate", `Bearer realm="onceledger"`)
				writeJSON(w, err.Status, errorBody{Error: errorInfo{Code: err.Code, Message: err.Message}})
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func authenticate(digests [][sha256.Size]byte, header string) *Error {
	if len(digests) == 0 {
		return unauthorized("api_keys_not_configured",
			"no API keys are configured: set ONCELEDGER_API_KEYS (comma-separated) to enable /v1")
	}
	// The scheme is case-insensitive (RFC 9110); the key is not.
	const scheme = "bearer "
	if len(header) <= len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) {
		return unauthorized("missing_api_key", "send the header Authorization: Bearer YOUR_KEY")
	}
	got := sha256.Sum256([]byte(header[len(scheme):]))
	match := 0
	for _, d := range digests {
		match |= subtle.ConstantTimeCompare(got[:], d[:])
	}
	if match != 1 {
		return unauthorized("invalid_api_key", "the API key is not valid")
	}
	return nil
}

func unauthorized(code, message string) *Error {
	return &Error{Status: http.StatusUnauthorized, Code: code, Message: message}
}
