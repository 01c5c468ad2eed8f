package db

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// Group commit of Checkout Sessions (LedgerConfig.GroupCheckouts): concurrent first deliveries of paid
// Checkout Sessions, of any accounts, commit in one transaction: PayCheckout's steps as one set-based
// statement each for the whole group (StripeEventsInsertGroup, StripeEventsLockPayments, TopupsPay,
// StripeEventsParkedWaiting, LedgerAppend: the same statements as one delivery's, with more rows), sent
// with BEGIN in one batch, then COMMIT. Each delivery still makes its own transaction's work in SQL (an event row, a paid
// order, a credit with its own seq and balance_after); what the group shares is the round trips, the
// statements' overhead and the commit.
//
// To each caller, PayCheckout is exactly its own transaction's answer: the group commits only when every
// member did what its own PayCheckout would have done (its event new, its order made paid on its
// account, nothing parked waiting for its payment, its credit posted). A member that did not is taken
// out and the others are grouped again; the members taken out, those that share an event, session,
// payment or key with an earlier member of the group, and every member of a group whose statement
// failed, each run their own PayCheckout once the group is over, and get its answer. One member never
// fails the others: at worst they all take their own transactions. Only a failed COMMIT is answered to
// every member as it is, as PayCheckout answers it: whether it committed is unknown, and a redelivery
// finds out.
//
// No member waits for others to arrive: a group is whoever arrived while the previous one committed, and
// a delivery that finds nobody else commits at once, alone, so a quiet webhook pays no latency for
// grouping. One group commits at a time, and never waits long for a lock (lock_timeout,
// checkoutLockTimeout): when a member's account, payment or event is held by another transaction (a
// billing chunk, a hot account's postings, a concurrent delivery), the group gives up and its members
// take their own transactions, so that one busy account never holds up the deliveries of the others for
// longer. Grouping is per process.

// checkoutAnswer is PayCheckout's answer to one member of a group.
type checkoutAnswer struct {
	paid   CheckoutPaid
	posted Posted
}

type checkoutMember = groupMember[CheckoutPayment, checkoutAnswer]

const (
	// checkoutWindow: a delivery does not wait for others. groupQueue waits for the window only
	// from the oldest member's arrival, so a microsecond commits whatever waits when the drain is
	// free, and lets an idle drain end at once.
	checkoutWindow = time.Microsecond
	// maxCheckoutGroup caps the deliveries in one transaction: the webhook's concurrency is the
	// server's connections, not thousands.
	maxCheckoutGroup = 128
	// checkoutGroupAttempts: the group, then once more without the members that did not go as
	// planned; a second surprise sends everyone to their own transaction.
	checkoutGroupAttempts = 2
	// checkoutLockTimeout bounds each lock wait of a group: long enough for the commits of other
	// deliveries and of a hot account's posting groups (a few milliseconds), short of a billing chunk.
	checkoutLockTimeout = 25 * time.Millisecond
)

// errPayAlone: the member runs its own PayCheckout (on its caller's goroutine, after the group).
var errPayAlone = errors.New("pay the session in its own transaction")

// payCheckoutGrouped is PayCheckout through the next group. When ctx ends before a group took p,
// nothing was written and ctx's error is returned.
func (l *Ledger) payCheckoutGrouped(ctx context.Context, p CheckoutPayment) (CheckoutPaid, Posted, error) {
	a, err := l.checkouts.do(ctx, "", p)
	if errors.Is(err, errPayAlone) {
		return l.payCheckoutOwn(ctx, p)
	}
	return a.paid, a.posted, err
}

func (l *Ledger) commitCheckouts(_ string, _ *struct{}, group []*checkoutMember) {
	if len(group) == 1 {
		// Alone, on the drain (the next group gathers meanwhile), with PayCheckout's own statements,
		// cheaper than the set-based ones for one; a lock held elsewhere sends it to its own goroutine.
		m := group[0]
		paid, posted, err := l.payCheckoutAlone(m.ctx, m.req, l.checkoutLockTimeout)
		if errors.Is(err, errLockWait) {
			err = errPayAlone
		}
		m.reply(checkoutAnswer{paid, posted}, err)
		return
	}
	ctx, cancel, span := groupContext(l.cfg.Tracing, "group_commit.checkouts", group)
	defer cancel()
	defer span.End()
	group, alone := distinctCheckouts(group)
	defer func() {
		for _, m := range alone {
			m.reply(checkoutAnswer{}, errPayAlone)
		}
	}()
	for range checkoutGroupAttempts {
		if len(group) < 2 {
			break
		}
		posted, planned, err := l.payGroup(ctx, group)
		switch {
		case errors.Is(err, errCommitFailed):
			for _, m := range group {
				m.reply(checkoutAnswer{}, err)
			}
			return
		case err != nil:
			// A statement failed (a payment that paid another order, a balance beyond a bigint, a lock
			// waited for too long, a deadlock, a lost connection): its own transaction tells each
			// member which.
			alone = append(alone, group...)
			return
		case posted != nil:
			for i, m := range group {
				m.reply(checkoutAnswer{CheckoutCredited, posted[i]}, nil)
			}
			return
		}
		var next []*checkoutMember
		for i, m := range group {
			if planned[i] {
				next = append(next, m)
			} else {
				alone = append(alone, m)
			}
		}
		group = next
	}
	alone = append(alone, group...)
}

// distinctCheckouts keeps, in arrival order, the members that share no event, session, payment or
// credit key with an earlier one; the others run alone after the group, and their own transactions
// find what the group did (a duplicate delivery, a session already paid). So do members the group's
// statements do not take: an event recorded parked, a credit without a dedupe key (the group tells
// its credits apart by their keys).
func distinctCheckouts(group []*checkoutMember) (distinct, alone []*checkoutMember) {
	seen := map[string]bool{}
	for _, m := range group {
		p := m.req
		keys := []string{"event " + p.Event.ID, "session " + p.Order.SessionID, "order " + p.Order.ID,
			"payment " + p.Order.PaymentIntent, "key " + p.Credit.DedupeKey}
		if p.Event.ParkedReason != "" || p.Credit.DedupeKey == "" || slices.ContainsFunc(keys, func(k string) bool { return seen[k] }) {
			alone = append(alone, m)
			continue
		}
		for _, k := range keys {
			seen[k] = true
		}
		distinct = append(distinct, m)
	}
	return distinct, alone
}

// errCommitFailed: the group's COMMIT failed, and whether it committed is unknown.
var errCommitFailed = errors.New("commit of a group of deliveries")

// payGroup runs group's transaction. When every member went as planned it commits and returns each
// member's credit (posted, in group order); otherwise it rolls back and returns which members did
// (planned). err is a statement's failure (the transaction rolled back) or errCommitFailed.
func (l *Ledger) payGroup(ctx context.Context, group []*checkoutMember) (posted []Posted, planned []bool, err error) {
	var (
		events   = dbsqlc.StripeEventsInsertGroupParams{}
		payments = make([]CheckoutPayment, len(group))
		credits  = make([]Posting, len(group))
	)
	for i, m := range group {
		e := m.req.Event
		events.EventIDs = append(events.EventIDs, e.ID)
		events.Types = append(events.Types, e.Type)
		events.APIVersions = append(events.APIVersions, e.APIVersion)
		events.Livemodes = append(events.Livemodes, e.Livemode)
		events.Created = append(events.Created, e.Created)
		events.Payloads = append(events.Payloads, e.Payload)
		events.Outcomes = append(events.Outcomes, e.Outcome)
		events.PaymentIntents = append(events.PaymentIntents, e.PaymentIntent)
		payments[i], credits[i] = m.req, m.req.credit()
	}
	orders := payArgs(payments...)
	var (
		recorded []string
		paid     []dbsqlc.Topup
		waiting  []string
		entries  []dbsqlc.LedgerAppendRow
	)
	tx, errs, err := beginPipelined(ctx, l.pool, l.checkoutLockTimeout, []step{
		func(q *dbsqlc.Queries) (err error) {
			recorded, err = q.StripeEventsInsertGroup(ctx, events)
			return err
		},
		func(q *dbsqlc.Queries) error { return q.StripeEventsLockPayments(ctx, orders.PaymentIntents) },
		func(q *dbsqlc.Queries) (err error) { paid, err = q.TopupsPay(ctx, orders); return err },
		func(q *dbsqlc.Queries) (err error) {
			waiting, err = q.StripeEventsParkedWaiting(ctx, orders.PaymentIntents)
			return err
		},
		func(q *dbsqlc.Queries) (err error) {
			entries, err = q.LedgerAppend(ctx, l.appendArgs(credits, nil))
			return err
		},
	})
	if err != nil {
		return nil, nil, err
	}
	if err := firstError(errs); err != nil {
		_ = endPipelined(ctx, tx, false)
		return nil, nil, fmt.Errorf("group of %d deliveries: %w", len(group), MapError(err))
	}

	isRecorded := map[string]bool{}
	for _, id := range recorded {
		isRecorded[id] = true
	}
	parked := map[string]bool{}
	for _, pi := range waiting {
		parked[pi] = true
	}
	paidBy := map[string]dbsqlc.Topup{}
	for _, r := range paid {
		paidBy[deref(r.SessionID)] = r
	}
	inserted, byRow := appended(entries, len(group))
	planned = make([]bool, len(group))
	posted = make([]Posted, len(group))
	all := true
	for i, m := range group {
		p := m.req
		order, orderPaid := paidBy[p.Order.SessionID]
		planned[i] = isRecorded[p.Event.ID] && orderPaid && order.AccountID == p.Order.AccountID && !parked[p.Order.PaymentIntent] && byRow[i] != nil
		all = all && planned[i]
		if byRow[i] != nil {
			posted[i] = Posted{Entry: *byRow[i], New: true}
		}
	}
	if !all {
		return nil, planned, endPipelined(ctx, tx, false)
	}
	if err := l.inserted(ctx, tx, inserted); err != nil {
		_ = endPipelined(ctx, tx, false)
		return nil, nil, err
	}
	if err := endPipelined(ctx, tx, true); err != nil {
		return nil, nil, fmt.Errorf("%w of %d: %w", errCommitFailed, len(group), err)
	}
	return posted, planned, nil
}
