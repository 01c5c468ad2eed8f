package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"unicode"
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

// FuzzExactKeys holds exactKeys, which reads the bytes once, to what a walk of encoding/json's tokens
// finds in the same valid JSON: the same refusal (code and message) or none, with the fields of the
// decisions intake and of an adjustment.
func FuzzExactKeys(f *testing.F) {
	for _, seed := range []string{
		`{"amount":1,"description":"x"}`, `{"amount":1,"amount":2}`, `{"Amount":1}`, `{"a":{"b":1,"B":2},"A":3}`,
		`[{"id":"d1","cost":1},{"id":"d2","Cost":2}]`, `{"\u0061mount":1}`, `{"amount\u0000":1,"amount":2}`,
		`{"ſ":1,"S":2}`, `{"K":{"k":1}}`, `{"x":"\"}:{\"","x\\":1}`, " [ ] ", `"str"`, `{"a":[{"a":1},{"a":2}]}`,
	} {
		f.Add(seed)
	}
	types := []any{&[]decisionJSON{}, &struct {
		Amount      *int64  `json:"amount"`
		Description *string `json:"description"`
	}{}}
	f.Fuzz(func(t *testing.T, body string) {
		if !json.Valid([]byte(body)) {
			return
		}
		for _, dst := range types {
			fields := fieldsOf(reflect.TypeOf(dst))
			got := exactKeys([]byte(body), fields)
			tokens := json.NewDecoder(strings.NewReader(body))
			tokens.UseNumber() // the walk looks at keys, not at whether a number fits a float64
			want := exactKeysByTokens(tokens, fields)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%T: exactKeys = %v, the token walk %v", dst, got, want)
			}
		}
	})
}

// exactKeysByTokens is what exactKeys does, written on encoding/json's tokens: slower, plainly right.
func exactKeysByTokens(dec *json.Decoder, fields map[string]string) error {
	tok, err := dec.Token()
	if err != nil {
		return jsonError(err)
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return jsonError(err)
			}
			key, _ := tok.(string)
			folded := strings.Map(func(r rune) rune { return unicode.ToUpper(unicode.ToLower(r)) }, key)
			if seen[folded] {
				return badRequest("invalid_json", fmt.Sprintf("key %q appears more than once in an object", key))
			}
			seen[folded] = true
			if name, ok := fields[folded]; ok && name != key {
				return badRequest("invalid_json", fmt.Sprintf("key %q must be written %q", key, name))
			}
			if err := exactKeysByTokens(dec, fields); err != nil {
				return err
			}
		}
	case json.Delim('['):
		for dec.More() {
			if err := exactKeysByTokens(dec, fields); err != nil {
				return err
			}
		}
	default:
		return nil
	}
	_, err = dec.Token()
	return err
}
