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
	start, err := q.AccountsLockForGroup(ctx, postings[0].AccountID)
	if err != nil {
		return err
	}
	group := make([]*member, len(postings))
	var insert []int
	for i, p := range postings {
		group[i] = &member{req: p}
		insert = append(insert, i)
	}
	rows, err := q.LedgerInsertGroup(ctx, groupInsertArgs(group, insert, start))
	_, err = groupEntries(group, insert, rows, err)
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
	g.queue.commit = func(key string, memo *struct{}, group []*checkoutMember) {
		if first {
			first = false
			waiting.Store(true)
			<-gate
		}
		commit(key, memo, group)
	}
	return waiting.Load, func() { once.Do(func() { close(gate) }) }
}

// SetCheckoutLockTimeout sets how long g's groups wait for a lock, so that a test can catch one
// waiting.
func SetCheckoutLockTimeout(g *CheckoutGrouper, d time.Duration) { g.lockTimeout = d }

// ErrPostAlone is what a group that cannot be planned as one returns.
var ErrPostAlone = errPostAlone

// PostGroupPlannedOn runs postings as one of s's groups planned on balance, as if the account's
// previous group had left it: its outcomes in order, and the balance the group left.
func PostGroupPlannedOn(ctx context.Context, s *Poster, postings []Posting, balance int64) ([]Posted, []error, int64, error) {
	group := make([]*member, len(postings))
	for i, p := range postings {
		group[i] = &member{req: p}
	}
	outcomes, left, err := s.postGroup(ctx, group, false, lastBalance{balance: balance, known: true})
	if err != nil {
		return nil, nil, 0, err
	}
	outs := make([]Posted, len(outcomes))
	errs := make([]error, len(outcomes))
	for i, o := range outcomes {
		outs[i], errs[i] = o.ans, o.err
	}
	return outs, errs, left, nil
}
