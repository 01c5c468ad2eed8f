package access

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Throttle slows down the guessing of keys, at the API's bearer check and the console's login: after
// FreeFailures failed attempts from one address, or with one key prefix (a secret's first characters),
// each further attempt of that address or prefix is refused, unchecked, until a delay that doubles with
// every failure (from BaseDelay up to MaxDelay) has passed since the last one. A success resets nothing:
// a caller holding one valid key could otherwise guess another between its requests. Failures are
// forgotten after ForgetAfter without any. While no failure is remembered, Wait is one atomic load:
// the hot routes pay nothing for it.
type Throttle struct {
	FreeFailures int
	BaseDelay    time.Duration
	MaxDelay     time.Duration
	ForgetAfter  time.Duration

	remembered atomic.Int64 // len(failures), read without the lock
	mu         sync.RWMutex
	failures   map[throttled]*failures
}

// throttled is what failures are counted by: an address, or a key prefix.
type throttled struct {
	prefix bool
	value  string
}

type failures struct {
	count int
	last  time.Time
}

// NewThrottle returns the throttle with the service's settings: three free failures, then 1 s doubling
// up to 15 minutes, forgotten after an hour. At most a handful of tries reach the check from one
// address; a thousand take days.
func NewThrottle() *Throttle {
	return &Throttle{FreeFailures: 3, BaseDelay: time.Second, MaxDelay: 15 * time.Minute, ForgetAfter: time.Hour}
}

// maxRemembered bounds the memory of failures: past it, the oldest half is forgotten.
const maxRemembered = 100_000

// prefixLength is how many characters of a presented secret its prefix holds.
const prefixLength = 8

// Wait is how long an attempt from addr with secret must wait before it may be checked; 0 when it may
// be now.
func (t *Throttle) Wait(addr, secret string) time.Duration {
	if t.remembered.Load() == 0 {
		return 0
	}
	now := time.Now()
	t.mu.RLock()
	defer t.mu.RUnlock()
	return max(t.wait(throttled{false, addr}, now), t.wait(throttled{true, prefix(secret)}, now))
}

func (t *Throttle) wait(key throttled, now time.Time) time.Duration {
	f := t.failures[key]
	if f == nil || f.count < t.FreeFailures {
		return 0
	}
	delay := t.BaseDelay << min(f.count-t.FreeFailures, 30)
	if delay <= 0 || delay > t.MaxDelay {
		delay = t.MaxDelay
	}
	return max(0, f.last.Add(delay).Sub(now))
}

// Fail records a failed attempt from addr with secret.
func (t *Throttle) Fail(addr, secret string) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failures == nil {
		t.failures = map[throttled]*failures{}
	}
	for _, key := range []throttled{{false, addr}, {true, prefix(secret)}} {
		f := t.failures[key]
		if f == nil || now.Sub(f.last) > t.ForgetAfter {
			f = &failures{}
			t.failures[key] = f
		}
		f.count++
		f.last = now
	}
	if len(t.failures) > maxRemembered {
		t.forget(now)
	}
	t.remembered.Store(int64(len(t.failures)))
}

// forget drops the failures older than ForgetAfter and, when that is not enough, the oldest half.
func (t *Throttle) forget(now time.Time) {
	var lasts []time.Time
	for key, f := range t.failures {
		if now.Sub(f.last) > t.ForgetAfter {
			delete(t.failures, key)
			continue
		}
		lasts = append(lasts, f.last)
	}
	if len(t.failures) <= maxRemembered/2 {
		return
	}
	slices.SortFunc(lasts, time.Time.Compare)
	cutoff := lasts[len(lasts)/2]
	for key, f := range t.failures {
		if f.last.Before(cutoff) {
			delete(t.failures, key)
		}
	}
}

func prefix(secret string) string {
	return secret[:min(prefixLength, len(secret))]
}
