package db

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// InsertGroupAsAdmitted runs a group's insert as if its plan had admitted every posting, whatever the
// locked balance: the plan of a planner that admits too much. A refused insert returns an error.
func InsertGroupAsAdmitted(ctx context.Context, tx Tx, postings []Posting) error {
	q := dbsqlc.New(tx)
	if _, err := q.AccountsLockForGroup(ctx, postings[0].AccountID); err != nil {
		return err
	}
	group := make([]*member, len(postings))
	var insert []int
	for i, p := range postings {
		group[i] = &member{req: p}
		insert = append(insert, i)
	}
	_, err := insertGroup(ctx, q, group, insert)
	return err
}

// CheckoutsWaiting is how many deliveries wait for g's next group.
func CheckoutsWaiting(g *CheckoutGrouper) int {
	g.queue.mu.Lock()
	defer g.queue.mu.Unlock()
	if q := g.queue.queues[""]; q != nil {
		return len(q.waiting)
	}
	return 0
}

// GateCheckoutGroups makes g's next group wait, once taken, until release is called; held reports
// whether a group waits there. Call it before g is used.
func GateCheckoutGroups(g *CheckoutGrouper) (held func() bool, release func()) {
	var waiting atomic.Bool
	gate := make(chan struct{})
	var once sync.Once
	commit := g.queue.commit
	first := true
	g.queue.commit = func(key string, group []*checkoutMember) {
		if first {
			first = false
			waiting.Store(true)
			<-gate
		}
		commit(key, group)
	}
	return waiting.Load, func() { once.Do(func() { close(gate) }) }
}

// SetCheckoutLockTimeout sets how long g's groups wait for a lock, so that a test can catch one
// waiting.
func SetCheckoutLockTimeout(g *CheckoutGrouper, d time.Duration) { g.lockTimeout = d }
