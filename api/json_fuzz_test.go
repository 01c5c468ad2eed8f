package api

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzDecodeJSON feeds decodeJSON arbitrary bodies for a request shaped like the API's (strings,
// numbers, a map, a nested object, a list): it never panics, never reads past its limit, and every
// error is an *Error with a 4xx status and a code. Seeds: testdata/fuzz/FuzzDecodeJSON.
func FuzzDecodeJSON(f *testing.F) {
	type line struct {
		Description string `json:"description"`
		Amount      int64  `json:"amount"`
	}
	type request struct {
		AccountID string            `json:"account_id"`
		Amount    int64             `json:"amount"`
		Currency  string            `json:"currency"`
		Overdraw  bool              `json:"overdraw"`
		Metadata  map[string]string `json:"metadata"`
		Source    *struct {
			Kind string `json:"kind"`
		} `json:"source"`
		Lines []line `json:"lines"`
	}
	const maxBytes = 4 << 10

	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/any", strings.NewReader(body))
		var dst request
		err := decodeJSON(httptest.NewRecorder(), r, maxBytes, &dst)
		if err == nil {
			if len(body) > maxBytes {
				t.Fatalf("a %d-byte body was accepted past the %d-byte limit", len(body), maxBytes)
			}
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
