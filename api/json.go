package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"unicode"
)

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// decodeJSON reads one JSON value of at most maxBytes into dst, refusing unknown fields, trailing
// data, and keys that encoding/json would otherwise read loosely: a key twice in one object (the last
// would win) and a key matching a field only when case is ignored ("Amount" for "amount"). Its errors
// are *Error with a code that says what was wrong.
func decodeJSON(w http.ResponseWriter, r *http.Request, maxBytes int64, dst any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBytes))
	if err != nil {
		return jsonError(err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err)
	}
	if dec.More() {
		return badRequest("invalid_json", "body must hold a single JSON value")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("invalid_json", "body must hold a single JSON value")
	}
	// The body is one valid JSON value now, so walking its tokens cannot fail on syntax.
	return exactKeys(json.NewDecoder(bytes.NewReader(body)), fieldsOf(reflect.TypeOf(dst)))
}

// fieldsByType caches fieldNames per destination type: a handful of types, each walked once rather
// than on every request.
var fieldsByType sync.Map // reflect.Type → map[string]string, read-only once stored

func fieldsOf(t reflect.Type) map[string]string {
	if fields, ok := fieldsByType.Load(t); ok {
		return fields.(map[string]string)
	}
	fields, _ := fieldsByType.LoadOrStore(t, fieldNames(t, map[string]string{}))
	return fields.(map[string]string)
}

// exactKeys walks one JSON value and refuses an object holding a key twice (compared as encoding/json
// compares keys with fields, ignoring case) or a key that names a field (fields: folded name → name)
// only when case is ignored.
func exactKeys(dec *json.Decoder, fields map[string]string) error {
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
			folded := foldKey(key)
			if seen[folded] {
				return badRequest("invalid_json", fmt.Sprintf("key %q appears more than once in an object", key))
			}
			seen[folded] = true
			if name, ok := fields[folded]; ok && name != key {
				return badRequest("invalid_json", fmt.Sprintf("key %q must be written %q", key, name))
			}
			if err := exactKeys(dec, fields); err != nil {
				return err
			}
		}
	case json.Delim('['):
		for dec.More() {
			if err := exactKeys(dec, fields); err != nil {
				return err
			}
		}
	default:
		return nil
	}
	_, err = dec.Token() // the closing delimiter
	return err
}

// foldKey is the form encoding/json compares a key in when it matches it to a field: two keys with the
// same fold would fill the same field.
func foldKey(key string) string {
	return strings.Map(func(r rune) rune { return unicode.ToUpper(unicode.ToLower(r)) }, key)
}

// fieldNames adds to fields the JSON names of the struct fields reachable from t, by their folded form.
func fieldNames(t reflect.Type, fields map[string]string) map[string]string {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return fieldNames(t.Elem(), fields)
	case reflect.Struct:
		for i := range t.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			if name != "" && name != "-" {
				fields[foldKey(name)] = name
			}
			fieldNames(t.Field(i).Type, fields)
		}
	}
	return fields
}

// jsonError answers a body that could not be read or decoded. Its message never carries the error's
// own text beyond the field it names: a failed read's error holds the connection's addresses, which
// go to the log only (Error.Cause).
func jsonError(err error) *Error {
	var (
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
		tooBig    *http.MaxBytesError
	)
	switch {
	case errors.Is(err, io.EOF):
		return badRequest("empty_body", "a JSON body is required")
	case errors.As(err, &tooBig):
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large", Message: fmt.Sprintf("body exceeds %d bytes", tooBig.Limit)}
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("invalid_json", "body is not valid JSON")
	case errors.As(err, &typeErr) && typeErr.Field == "":
		want := "an object"
		if typeErr.Type.Kind() == reflect.Slice {
			want = "an array"
		}
		return badRequest("invalid_body", "body must be a JSON "+want)
	case errors.As(err, &typeErr):
		return badRequest("invalid_"+typeErr.Field, fmt.Sprintf("field %q must be %s", typeErr.Field, typeErr.Type))
	default:
		if field, ok := unknownField(err); ok {
			return badRequest("unknown_field", fmt.Sprintf("unknown field %s", field))
		}
		apiErr := badRequest("invalid_json", "the body could not be read as JSON")
		apiErr.Cause = err
		return apiErr
	}
}

// unknownField recognises encoding/json's DisallowUnknownFields error, which has no type of its own.
func unknownField(err error) (string, bool) {
	const prefix = "json: unknown field "
	if msg := err.Error(); len(msg) > len(prefix) && msg[:len(prefix)] == prefix {
		return msg[len(prefix):], true
	}
	return "", false
}
