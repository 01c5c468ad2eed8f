package client

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// APIError is the API's refusal of a call (any answer of 400 or more), with the code and message of
// its body, {"ok":false,"error":{"code":"…","message":"…"}}. Code is stable and snake_case
// ("insufficient_balance", "invalid_amount", "idempotency_conflict"): branch on it, with errors.As.
// Message is for people and may change.
type APIError struct {
	StatusCode int
	// Code is empty when the answer is not the API's (a proxy's error page): Message then holds the
	// start of its body.
	Code    string
	Message string
}

func (e *APIError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("onceledger: %d %s: %s", e.StatusCode, http.StatusText(e.StatusCode), e.Message)
	}
	return fmt.Sprintf("onceledger: %d %s: %s", e.StatusCode, e.Code, e.Message)
}

// readAPIError reads a refusal's body (at most 64 KiB: the API's are a few hundred bytes).
func readAPIError(resp *http.Response) *APIError {
	e := &APIError{StatusCode: resp.StatusCode}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		e.Message = "reading the answer: " + err.Error()
		return e
	}
	var wire Error // the API's error document, generated from openapi.yaml
	if json.Unmarshal(body, &wire) == nil && wire.Error.Code != "" {
		e.Code, e.Message = wire.Error.Code, wire.Error.Message
		return e
	}
	text := strings.TrimSpace(string(body))
	if len(text) > 200 {
		text = strings.ToValidUTF8(text[:200], "") + "…"
	}
	e.Message = text
	return e
}
