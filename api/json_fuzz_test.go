package api

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzDecodeJSON feeds the decisions intake, the API's largest body, arbitrary bytes: decodeJSON then
// checkDecisions, as the handler runs them. Neither panics, nothing past the limit is accepted, and
// every refusal is an *Error with a 4xx status and a code naming the field. Seeds:
// testdata/fuzz/FuzzDecodeJSON.
func FuzzDecodeJSON(f *testing.F) {
	const maxBytes = 4 << 10

	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/any", strings.NewReader(body))
		var batch []decisionJSON
		err := decodeJSON(httptest.NewRecorder(), r, maxBytes, &batch)
		if err == nil && len(body) > maxBytes {
			t.Fatalf("a %d-byte body was accepted past the %d-byte limit", len(body), maxBytes)
		}
		if err == nil {
			err = checkDecisions(batch)
		}
		if err == nil {
			return
		}
		var apiErr *Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("error %T %v is not an *api.Error", err, err)
		}
		if apiErr.Status < 400 || apiErr.Status > 499 || apiErr.Code == "" {
			t.Fatalf("error %+v: want a 4xx status and a code", apiErr)
		}
	})
}
