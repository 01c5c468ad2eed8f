package api

import (
	"math/bits"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// A thousand wrong keys from one address: a handful are checked (401), the rest refused unchecked with
// 429 and a Retry-After, so that guessing runs at a few tries per address, not thousands per second;
// while it lasts the address is refused with any key. Every refusal is in the audit trail.
func TestWrongKeysAreThrottled(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_guess", "usd", 0)
	answers, start := map[int]int{}, time.Now()
	for i := range 1000 {
		got := s.call(http.MethodGet, "/v1/accounts/acct_guess", nil, "Authorization", "Bearer guess_"+strconv.Itoa(i)+"_onceledger_000000000000")
		answers[got.Status]++
		if got.Status == http.StatusTooManyRequests && (got.code() != "too_many_attempts" || got.Header.Get("Retry-After") == "") {
			t.Fatalf("429 without its code or Retry-After: %v %s", got.Header, got.Body)
		}
	}
	// Three free failures, then one more each time the doubling delay has passed: 1 s, 3 s, 7 s, …
	if checked := 3 + 1 + bits.Len(uint(time.Since(start).Seconds())); answers[http.StatusUnauthorized] > checked ||
		answers[http.StatusUnauthorized]+answers[http.StatusTooManyRequests] != 1000 {
		t.Fatalf("answers %v in %s: want at most %d keys checked, the rest refused", answers, time.Since(start), checked)
	}
	s.call(http.MethodGet, "/v1/accounts/acct_guess", nil).want(t, http.StatusTooManyRequests, "too_many_attempts")
	if n := s.count(`SELECT count(*) FROM audit_log WHERE status IN (401, 429) AND remote_addr = '127.0.0.1'`); n != 1001 {
		t.Fatalf("%d refusals in the audit trail, want 1001", n)
	}
}
