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
func InsertGroupAsAdmitted(ctx context.Context, l *Ledger, tx Tx, postings []Posting) error {
	group := make([]*member, len(postings))
	var insert []int
	for i, p := range postings {
		group[i] = &member{req: p}
		insert = append(insert, i)
	}
	rows, err := dbsqlc.New(tx).LedgerAppend(ctx, l.appendArgs(postings, nil))
	_, _, err = groupEntries(group, insert, rows, err)
	return err
}

// CheckoutsWaiting is how many deliveries wait for l's next group of Checkout Sessions.
func CheckoutsWaiting(l *Ledger) int {
	l.checkouts.mu.Lock()
	defer l.checkouts.mu.Unlock()
	if q := l.checkouts.queues[""]; q != nil {
		return len(q.waiting)
	}
	return 0
}

// GateCheckoutGroups makes l's next group of Checkout Sessions wait, once taken, until release is
// called; held reports whether a group waits there. Call it before l is used.
func GateCheckoutGroups(l *Ledger) (held func() bool, release func()) {
	var waiting atomic.Bool
	gate := make(chan struct{})
	var once sync.Once
	commit := l.checkouts.commit
	first := true
	l.checkouts.commit = func(key string, memo *struct{}, group []*checkoutMember) {
		if first {
			first = false
			waiting.Store(true)
			<-gate
		}
		commit(key, memo, group)
	}
	return waiting.Load, func() { once.Do(func() { close(gate) }) }
}

// SetCheckoutLockTimeout sets how long l's groups of Checkout Sessions wait for a lock, so that a test
// can catch one waiting.
func SetCheckoutLockTimeout(l *Ledger, d time.Duration) { l.checkoutLockTimeout = d }

// ErrPostAlone is what a group that cannot be planned as one returns.
var ErrPostAlone = errPostAlone

// PostGroupPlannedOn runs postings as one of l's posting groups planned on balance, as if the
// account's previous group had left it: its outcomes in order, and the balance the group left.
func PostGroupPlannedOn(ctx context.Context, l *Ledger, postings []Posting, balance int64) ([]Posted, []error, int64, error) {
	group := make([]*member, len(postings))
	for i, p := range postings {
		group[i] = &member{req: p}
	}
	outcomes, left, err := l.postGroup(ctx, group, false, lastBalance{balance: balance, known: true})
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
