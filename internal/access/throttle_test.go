package access_test

import (
	"testing"

	"github.com/onceledger/onceledger/internal/access"
)

// After its free failures, an address is refused whatever key it sends, and a key prefix is refused
// from whatever address; other addresses and prefixes are not.
func TestThrottleByAddressAndPrefix(t *testing.T) {
	t.Parallel()
	th := access.NewThrottle()
	for i := range th.FreeFailures {
		if wait := th.Wait("10.0.0.1", "guess_0000_"+string(rune('a'+i))); wait != 0 {
			t.Fatalf("failure %d: already throttled (%s)", i, wait)
		}
		th.Fail("10.0.0.1", "guess_0000_"+string(rune('a'+i)))
	}
	if wait := th.Wait("10.0.0.1", "another_prefix"); wait <= 0 {
		t.Fatal("the address is not throttled after its free failures")
	}
	if wait := th.Wait("10.0.0.2", "guess_00_and_more"); wait <= 0 {
		t.Fatal("the key prefix is not throttled from another address")
	}
	if wait := th.Wait("10.0.0.2", "another_prefix"); wait != 0 {
		t.Fatalf("an innocent address and prefix throttled %s", wait)
	}
	// The delay grows with every failure.
	first := th.Wait("10.0.0.1", "x")
	th.Fail("10.0.0.1", "x")
	if second := th.Wait("10.0.0.1", "x"); second <= first {
		t.Fatalf("delay %s after one more failure, was %s", second, first)
	}
}
