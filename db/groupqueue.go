package db

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/onceledger/onceledger/internal/tracing"
)

// groupQueue gathers the concurrent requests of one key (an account) for up to a window and hands
// them, in arrival order, to commit in groups of at most max, one group at a time per key. Poster,
// HoldAuthoriser and CheckoutGrouper group through it: commit must answer every member of its group
// exactly once (a member's answer channel is buffered, so commit never blocks on a caller). memo is
// what commit keeps of a key from one of its groups to the next: it lives as long as the key's drain
// (zero when the drain starts, gone when it ends), so an idle key costs nothing.
type groupQueue[Req, Ans, Memo any] struct {
	window time.Duration
	max    int
	commit func(key string, memo *Memo, group []*groupMember[Req, Ans])

	mu     sync.Mutex
	queues map[string]*keyQueue[Req, Ans, Memo] // keys with a drain goroutine running
}

// A waiting request moves from memberWaiting to memberTaken (a group owns it and will answer) or to
// memberWithdrawn (its caller's context ended first and nothing was attempted).
const (
	memberWaiting int32 = iota
	memberTaken
	memberWithdrawn
)

type groupMember[Req, Ans any] struct {
	req     Req
	ctx     context.Context
	arrived time.Time
	state   atomic.Int32 // memberWaiting → memberTaken or memberWithdrawn
	answer  chan groupAnswer[Ans]
}

type groupAnswer[Ans any] struct {
	ans Ans
	err error
}

func (m *groupMember[Req, Ans]) reply(ans Ans, err error) { m.answer <- groupAnswer[Ans]{ans, err} }

type keyQueue[Req, Ans, Memo any] struct {
	waiting []*groupMember[Req, Ans] // guarded by groupQueue.mu
	// expect is how many requests make the next group complete: those that waited when the last group
	// was answered and its members, who tend to come back together; answered is when that was. A
	// member back before the answer was noted is counted twice, and the group waits out its window.
	// Guarded by groupQueue.mu.
	expect   int
	answered time.Time
	full     chan struct{} // wakes the drain when a group is complete before its window ends
	arrival  chan struct{} // wakes an idle drain
	memo     Memo          // touched only by the drain, through commit
}

// complete reports that the group need not wait for its window: max requests wait, or every one
// expected. Once they all have, waiting longer only adds latency.
func (q *keyQueue[Req, Ans, Memo]) complete(max int) bool {
	return len(q.waiting) >= max || (q.expect > 1 && len(q.waiting) >= q.expect)
}

// windowStart is when the next group's window began: at its first request's arrival, or when the last
// group was answered if that was later. Requests that queued while a group committed would otherwise
// go at once, and the callers that group answered, on their way back, would make a group of their own
// behind it: where a group's commit takes longer than a caller's way back (a cluster's two-phase
// commit), the callers settle into two groups taking turns, each half the size, for the same cost
// each.
func (q *keyQueue[Req, Ans, Memo]) windowStart() time.Time {
	if first := q.waiting[0].arrived; first.After(q.answered) {
		return first
	}
	return q.answered
}

// signal wakes the receiver of c, if it is not already due to wake.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func newGroupQueue[Req, Ans, Memo any](window time.Duration, max int, commit func(string, *Memo, []*groupMember[Req, Ans])) *groupQueue[Req, Ans, Memo] {
	if window <= 0 {
		window = defaultGroupWindow
	}
	if max <= 0 {
		max = defaultMaxGroup
	}
	return &groupQueue[Req, Ans, Memo]{window: window, max: max, commit: commit, queues: map[string]*keyQueue[Req, Ans, Memo]{}}
}

// do queues req under key and returns its answer once its group committed. When ctx ends before a
// group took req, nothing was attempted and ctx's error is returned; once taken, the answer is awaited.
func (g *groupQueue[Req, Ans, Memo]) do(ctx context.Context, key string, req Req) (Ans, error) {
	m := &groupMember[Req, Ans]{req: req, ctx: ctx, arrived: time.Now(), answer: make(chan groupAnswer[Ans], 1)}
	g.enqueue(key, m)
	select {
	case a := <-m.answer:
		return a.ans, a.err
	case <-ctx.Done():
		if m.state.CompareAndSwap(memberWaiting, memberWithdrawn) {
			var zero Ans
			return zero, fmt.Errorf("queued for %s: %w", key, ctx.Err())
		}
		a := <-m.answer
		return a.ans, a.err
	}
}

func (g *groupQueue[Req, Ans, Memo]) enqueue(key string, m *groupMember[Req, Ans]) {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.queues[key]
	if q == nil {
		q = &keyQueue[Req, Ans, Memo]{full: make(chan struct{}, 1), arrival: make(chan struct{}, 1)}
		g.queues[key] = q
		go g.drain(key, q)
	}
	q.waiting = append(q.waiting, m)
	signal(q.arrival)
	if q.complete(g.max) {
		signal(q.full)
	}
}

// drain commits a key's groups one after the other until none arrived for a whole window, then ends:
// an idle key costs no goroutine. Lingering that long keeps the last group's size for the callers it
// answered, who are usually on their way back.
func (g *groupQueue[Req, Ans, Memo]) drain(key string, q *keyQueue[Req, Ans, Memo]) {
	for {
		g.mu.Lock()
		if len(q.waiting) == 0 {
			g.mu.Unlock()
			timer := time.NewTimer(g.window)
			select {
			case <-q.arrival:
				timer.Stop()
				continue
			case <-timer.C:
			}
			g.mu.Lock()
			if len(q.waiting) == 0 {
				delete(g.queues, key)
				g.mu.Unlock()
				return
			}
		}
		wait := g.window - time.Since(q.windowStart())
		complete := q.complete(g.max)
		g.mu.Unlock()
		if !complete && wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-q.full:
			}
			timer.Stop()
		}
		if group := g.take(q); len(group) > 0 {
			g.commit(key, &q.memo, group)
			g.mu.Lock()
			q.expect, q.answered = len(q.waiting)+len(group), time.Now()
			g.mu.Unlock()
		}
	}
}

// take removes up to max waiting requests, skipping those whose callers already left.
func (g *groupQueue[Req, Ans, Memo]) take(q *keyQueue[Req, Ans, Memo]) []*groupMember[Req, Ans] {
	g.mu.Lock()
	n := min(len(q.waiting), g.max)
	batch := q.waiting[:n:n]
	q.waiting = slices.Clone(q.waiting[n:])
	select {
	case <-q.full:
	default:
	}
	g.mu.Unlock()

	group := make([]*groupMember[Req, Ans], 0, len(batch))
	for _, m := range batch {
		if !m.state.CompareAndSwap(memberWaiting, memberTaken) {
			continue
		}
		if err := m.ctx.Err(); err != nil {
			var zero Ans
			m.reply(zero, fmt.Errorf("queued: %w", err))
			continue
		}
		group = append(group, m)
	}
	return group
}

// groupContext is the context a group's transaction runs in: its own, for at most groupTimeout, since
// it runs for many callers and none of their contexts may cancel it. Traced, it carries the group's
// span (name), linked to the span of each member's request.
func groupContext[Req, Ans any](tr *tracing.Tracing, name string, group []*groupMember[Req, Ans]) (context.Context, context.CancelFunc, trace.Span) {
	ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
	ctx, span := tr.Group(ctx, name, len(group), func(i int) context.Context { return group[i].ctx })
	return ctx, cancel, span
}
