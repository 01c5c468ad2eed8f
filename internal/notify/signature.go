package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SignatureHeader carries Sign's value on every delivery.
const SignatureHeader = "Onceledger-Signature"

// ErrBadSignature: the signature header is missing, malformed, too old, or signed with another secret
// or over another body.
var ErrBadSignature = errors.New("notification signature does not verify")

// Sign returns the signature header value for body sent at t: "t=<unix seconds>,v1=<hex HMAC-SHA256
// of "<unix seconds>.<body>" keyed by secret>". The timestamp is inside the signed text, so a
// captured request cannot be replayed later with a fresh timestamp.
func Sign(secret string, t time.Time, body []byte) string {
	unix := strconv.FormatInt(t.Unix(), 10)
	return "t=" + unix + ",v1=" + hex.EncodeToString(mac(secret, unix, body))
}

// Verify checks a signature header made by Sign against the raw request body, as a receiver does:
// the HMAC must match (compared in constant time) and the timestamp must be within tolerance of now.
// Unknown fields in the header are ignored, so that more signature versions can be added later.
func Verify(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var unix string
	var sigs [][]byte
	for _, field := range strings.Split(header, ",") {
		key, value, _ := strings.Cut(strings.TrimSpace(field), "=")
		switch key {
		case "t":
			unix = value
		case "v1":
			if sig, err := hex.DecodeString(value); err == nil {
				sigs = append(sigs, sig)
			}
		}
	}
	sec, err := strconv.ParseInt(unix, 10, 64)
	if err != nil || len(sigs) == 0 {
		return fmt.Errorf("%w: header %q has no t= and v1= fields", ErrBadSignature, header)
	}
	if age := now.Sub(time.Unix(sec, 0)); age > tolerance || age < -tolerance {
		return fmt.Errorf("%w: signed %s ago, tolerance %s", ErrBadSignature, age.Round(time.Second), tolerance)
	}
	want := mac(secret, unix, body)
	for _, sig := range sigs {
		if hmac.Equal(sig, want) {
			return nil
		}
	}
	return fmt.Errorf("%w: no v1 signature matches", ErrBadSignature)
}

func mac(secret, unix string, body []byte) []byte {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(unix))
	h.Write([]byte("."))
	h.Write(body)
	return h.Sum(nil)
}
