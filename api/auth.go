package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// apiKeys are the configured API keys, kept as SHA-256 digests.
type apiKeys [][sha256.Size]byte

func newAPIKeys(keys []string) apiKeys {
	digests := make(apiKeys, len(keys))
	for i, k := range keys {
		digests[i] = sha256.Sum256([]byte(k))
	}
	return digests
}

// match reports whether key is one of the keys. Every key is compared, in constant time, on SHA-256
// digests (equal lengths), so neither the position nor the length of a configured key leaks through
// timing. The API's bearer check and the console's login both ask it.
func (k apiKeys) match(key string) bool {
	got := sha256.Sum256([]byte(key))
	match := 0
	for _, d := range k {
		match |= subtle.ConstantTimeCompare(got[:], d[:])
	}
	return match == 1
}

// requireAPIKey lets a request through only with `Authorization: Bearer <key>` for one of keys.
func requireAPIKey(keys []string) func(http.Handler) http.Handler {
	digests := newAPIKeys(keys)
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

func authenticate(keys apiKeys, header string) *Error {
	if len(keys) == 0 {
		return unauthorized("api_keys_not_configured",
			"no API keys are configured: set ONCELEDGER_API_KEYS (comma-separated) to enable /v1")
	}
	// The scheme is case-insensitive (RFC 9110); the key is not.
	const scheme = "bearer "
	if len(header) <= len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) {
		return unauthorized("missing_api_key", "send the header Authorization: Bearer YOUR_KEY")
	}
	if !keys.match(header[len(scheme):]) {
		return unauthorized("invalid_api_key", "the API key is not valid")
	}
	return nil
}

func unauthorized(code, message string) *Error {
	return &Error{Status: http.StatusUnauthorized, Code: code, Message: message}
}
