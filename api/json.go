package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
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
	buf := bodyBuffers.Get().(*bytes.Buffer)
	defer putBodyBuffer(buf)
	buf.Reset()
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, maxBytes)); err != nil {
		return jsonError(err)
	}
	body := buf.Bytes()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err)
	}
	// Only JSON's whitespace may follow the value.
	if len(bytes.TrimLeft(body[dec.InputOffset():], " \t\r\n")) > 0 {
		return badRequest("invalid_json", "body must hold a single JSON value")
	}
	return exactKeys(body, fieldsOf(reflect.TypeOf(dst)))
}

// bodyBuffers hold request bodies while they are decoded (encoding/json copies what it keeps), so
// that a request does not allocate and grow its own.
var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// putBodyBuffer returns buf to the pool unless a large body (a batch of decisions) grew it.
func putBodyBuffer(buf *bytes.Buffer) {
	if buf.Cap() <= 64<<10 {
		bodyBuffers.Put(buf)
	}
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

// exactKeys refuses, in body (one valid JSON value), an object holding a key twice (compared as
// encoding/json compares keys with fields, ignoring case) or a key that names a field (fields: folded
// name → name) only when case is ignored. It reads the bytes once, without a decoder: in valid JSON a
// string followed by ':' is a key of the innermost open object. The folded keys of the open objects
// share one buffer, on the stack for the API's small bodies.
func exactKeys(body []byte, fields map[string]string) error {
	var (
		foldBuf  [512]byte
		spanBuf  [32]keySpan
		startBuf [8]int
		folded   = foldBuf[:0]  // the folded keys of every open object, one after another
		keys     = spanBuf[:0]  // where each of them is in folded
		objects  = startBuf[:0] // for each open object, its first key in keys
	)
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '{':
			objects = append(objects, len(keys))
		case '}':
			first := objects[len(objects)-1]
			objects = objects[:len(objects)-1]
			if first < len(keys) {
				folded = folded[:keys[first].start]
			}
			keys = keys[:first]
		case '"':
			end := stringEnd(body, i)
			raw := body[i : end+1]
			i = end
			if !followedByColon(body, end+1) {
				continue
			}
			key := raw[1 : len(raw)-1]
			if needsUnquote(key) {
				var s string
				if err := json.Unmarshal(raw, &s); err != nil {
					return jsonError(err)
				}
				key = []byte(s)
			}
			start := len(folded)
			folded = appendFold(folded, key)
			fold := folded[start:]
			for _, k := range keys[objects[len(objects)-1]:] {
				if bytes.Equal(folded[k.start:k.end], fold) {
					return badRequest("invalid_json", fmt.Sprintf("key %q appears more than once in an object", key))
				}
			}
			keys = append(keys, keySpan{start, len(folded)})
			if name, ok := fields[string(fold)]; ok && name != string(key) {
				return badRequest("invalid_json", fmt.Sprintf("key %q must be written %q", key, name))
			}
		}
	}
	return nil
}

// keySpan is where one folded key is in exactKeys' buffer.
type keySpan struct{ start, end int }

// stringEnd is the index of the quote closing the JSON string that opens at body[open].
func stringEnd(body []byte, open int) int {
	for i := open + 1; i < len(body); i++ {
		switch body[i] {
		case '\\':
			i++ // the escaped byte; a \uXXXX's hex digits are not quotes
		case '"':
			return i
		}
	}
	return len(body) - 1 // unreachable in valid JSON
}

// followedByColon reports whether the first byte from i that is not whitespace is ':'.
func followedByColon(body []byte, i int) bool {
	for ; i < len(body); i++ {
		switch body[i] {
		case ' ', '\t', '\r', '\n':
		case ':':
			return true
		default:
			return false
		}
	}
	return false
}

// needsUnquote reports whether a string's bytes differ from its value: an escape, or bytes outside
// ASCII, which encoding/json reads as they are only when they are valid UTF-8.
func needsUnquote(s []byte) bool {
	for _, c := range s {
		if c == '\\' || c >= utf8.RuneSelf {
			return true
		}
	}
	return false
}

// appendFold appends to dst the form encoding/json compares a key in when it matches it to a field:
// two keys with the same fold would fill the same field.
func appendFold(dst, key []byte) []byte {
	for i := 0; i < len(key); {
		if c := key[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, size := utf8.DecodeRune(key[i:])
		dst = utf8.AppendRune(dst, unicode.ToUpper(unicode.ToLower(r)))
		i += size
	}
	return dst
}

// foldKey is appendFold for a field's name.
func foldKey(key string) string {
	return string(appendFold(nil, []byte(key)))
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
// fieldCode is a JSON path's name in an error code: its object keys after the last array index,
// joined by "_".
func fieldCode(path string) string {
	parts := strings.Split(path, ".")
	for i := len(parts) - 1; i >= 0; i-- {
		if _, err := strconv.Atoi(parts[i]); err == nil {
			parts = parts[i+1:]
			break
		}
	}
	return strings.Join(parts, "_")
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
		// Field is the path to the field, array indexes included since Go 1.27 ("1.cost"): the code
		// names the field within its element ("cost"; "budget_amount" for "budget.amount"), the message
		// where it is.
		return badRequest("invalid_"+fieldCode(typeErr.Field), fmt.Sprintf("field %q must be %s", typeErr.Field, typeErr.Type))
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
