package db

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// Requests that queued while a group committed wait for the callers that group answered, and the two
// make one group: otherwise the callers settle into two halves taking turns, each group half the size
// for the same cost. Arrivals are backdated past the window instead of waiting it out: the queued
// requests' window is over, and only the previous group's answer may hold them back.
func TestGroupQueueWaitsForTheCallersItAnswered(t *testing.T) {
	t.Parallel()
	committing := make(chan int, 2)
	release := make(chan struct{})
	g := newGroupQueue(time.Hour, 256, func(_ string, _ *struct{}, group []*groupMember[int, int]) {
		committing <- len(group)
		<-release
		for _, m := range group {
			m.reply(len(group), nil)
		}
	})
	long := time.Now().Add(-2 * time.Hour)
	arrive := func(at time.Time) *groupMember[int, int] {
		m := &groupMember[int, int]{ctx: context.Background(), arrived: at, answer: make(chan groupAnswer[int], 1)}
		g.enqueue("acct", m)
		return m
	}

	first := arrive(long)
	if n := <-committing; n != 1 {
		t.Fatalf("first group of %d, want 1", n)
	}
	// Two more queue while it commits; then it answers its caller, who comes back.
	queued := []*groupMember[int, int]{arrive(long), arrive(long)}
	release <- struct{}{}
	<-first.answer
	// Back once the queue has taken note of the answer (a caller back sooner is counted twice, and its
	// group waits out its window).
	for {
		g.mu.Lock()
		noted := !g.queues["acct"].answered.IsZero()
		g.mu.Unlock()
		if noted {
			break
		}
		runtime.Gosched()
	}
	returned := arrive(time.Now())

	select {
	case n := <-committing:
		if n != 3 {
			t.Fatalf("second group of %d, want 3: the queued requests went without the caller the first group answered", n)
		}
	case <-time.After(time.Minute):
		t.Fatal("no second group within a minute: every expected request waits, so it should have gone at once")
	}
	release <- struct{}{}
	for _, m := range append(queued, returned) {
		if a := <-m.answer; a.ans != 3 {
			t.Fatalf("answered by a group of %d, want 3", a.ans)
		}
	}
}
