package db

import (
	"context"
	"errors"
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
		group[i] = &member{req: p, ctx: ctx}
	}
	outcomes, left, _, err := l.postGroup(ctx, group, false, lastBalance{balance: balance, known: true})
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

// PostInGroups posts through l's group commit, each of groups as one group of the account's drain, in
// order, the memo carried from one group to the next as while the account stays busy (so that a group
// is planned on the balance the one before it left): every member's answer, in order.
func PostInGroups(l *Ledger, account string, groups [][]Posting) ([]Posted, []error) {
	var (
		memo lastBalance
		outs []Posted
		errs []error
	)
	for _, g := range groups {
		members := make([]*member, len(g))
		for i, p := range g {
			members[i] = &member{req: p, ctx: context.Background(), answer: make(chan outcome, 1)}
		}
		l.commitPostings(account, &memo, members)
		for _, m := range members {
			a := <-m.answer
			outs, errs = append(outs, a.ans), append(errs, a.err)
		}
	}
	return outs, errs
}

// PayInGroups pays through l's group commit of Checkout Sessions, each of groups as one group, in
// order (a member the group sends to its own transaction runs it then, as PayCheckout does): every
// member's answer, in order.
func PayInGroups(l *Ledger, groups [][]CheckoutPayment) ([]CheckoutPaid, []Posted, []error) {
	var (
		paid  []CheckoutPaid
		outs  []Posted
		errs  []error
		empty struct{}
	)
	for _, g := range groups {
		members := make([]*checkoutMember, len(g))
		for i, p := range g {
			members[i] = &checkoutMember{req: p, ctx: context.Background(), answer: make(chan groupAnswer[checkoutAnswer], 1)}
		}
		l.commitCheckouts("", &empty, members)
		for _, m := range members {
			a := <-m.answer
			if errors.Is(a.err, errPayAlone) {
				a.ans.paid, a.ans.posted, a.err = l.payCheckoutOwn(context.Background(), m.req)
			}
			paid, outs, errs = append(paid, a.ans.paid), append(outs, a.ans.posted), append(errs, a.err)
		}
	}
	return paid, outs, errs
}

// AuthoriseAsOneGroup runs the authorisations (accounts[i], reqs[i]) as one of l's groups of a tree's
// authorisations, in that arrival order: each caller's answer in order.
func AuthoriseAsOneGroup(ctx context.Context, l *Ledger, accounts []string, reqs []HoldRequest) ([]HoldAuthorised, []error) {
	group := make([]*authMember, len(reqs))
	for i, r := range reqs {
		group[i] = &authMember{req: accountHold{account: accounts[i], HoldRequest: r}, ctx: ctx, answer: make(chan groupAnswer[HoldAuthorised], 1)}
	}
	l.commitHolds("", nil, group)
	outs := make([]HoldAuthorised, len(group))
	errs := make([]error, len(group))
	for i, m := range group {
		a := <-m.answer
		outs[i], errs[i] = a.ans, a.err
	}
	return outs, errs
}
