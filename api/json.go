package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
)

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// decodeJSON reads one JSON value of at most maxBytes into dst, refusing unknown fields and trailing
// data. Its errors are *Error with a code that says what was wrong.
func decodeJSON(w http.ResponseWriter, r *http.Request, maxBytes int64, dst any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBytes))
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
	return nil
}

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
		return badRequest("invalid_json", err.Error())
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
