package db

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// CheckoutGrouper commits concurrent first deliveries of paid Checkout Sessions, of any accounts, in
// one transaction: Ledger.PayCheckout's four steps as one set-based statement each for the whole group
// (StripeEventsInsertGroup, StripeEventsLockPayments, TopupsPaySessions, LedgerInsertCredits), sent
// with BEGIN in one batch, then COMMIT. Each delivery still makes its own transaction's work in SQL
// (an event row, a paid order, a credit with its own seq and balance_after); what the group shares is
// the round trips, the statements' overhead and the commit.
//
// To each caller, Pay is exactly Ledger.PayCheckout: the group commits only when every member did what
// its own PayCheckout would have done (its event new, its order made paid on its account, nothing
// parked waiting for its payment, its credit posted). A member that did not is taken out and the
// others are grouped again; the members taken out, those that share an event, session, payment or
// key with an earlier member of the group, and every member of a group whose statement failed, each
// run their own PayCheckout once the group is over, and get its answer. One member never fails the
// others: at worst they all take their own transactions. Only a failed COMMIT is answered to every
// member as it is, as PayCheckout answers it: whether it committed is unknown, and a redelivery finds
// out.
//
// No member waits for others to arrive: a group is whoever arrived while the previous one committed,
// and a delivery that finds nobody else commits at once, alone, with PayCheckout's statements, so a
// quiet webhook pays no latency for grouping. One group commits at a time, and never waits long for a lock (lock_timeout,
// checkoutLockTimeout): when a member's account, payment or event is held by another transaction (a
// billing chunk, a hot account's postings, a concurrent delivery), the group gives up and its members
// take their own transactions, so that one busy account never holds up the deliveries of the others
// for longer. Grouping is per process; on Citus every member takes its own transaction (where
// PayCheckout leaves the event to the general path).
type CheckoutGrouper struct {
	pool        *Pool
	ledger      Ledger
	queue       *groupQueue[CheckoutPayment, checkoutAnswer, struct{}]
	lockTimeout time.Duration
}

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

// NewCheckoutGrouper returns a grouper that commits through ledger (so that OnPosted rides along, in
// the group's transaction) on pool.
func NewCheckoutGrouper(pool *Pool, ledger Ledger) *CheckoutGrouper {
	g := &CheckoutGrouper{pool: pool, ledger: ledger, lockTimeout: checkoutLockTimeout}
	g.queue = newGroupQueue(checkoutWindow, maxCheckoutGroup, g.commit)
	return g
}

// Pay is Ledger.PayCheckout(ctx, pool, p) through the next group. When ctx ends before a group took p,
// nothing was written and ctx's error is returned.
func (g *CheckoutGrouper) Pay(ctx context.Context, p CheckoutPayment) (CheckoutPaid, Posted, error) {
	a, err := g.queue.do(ctx, "", p)
	if errors.Is(err, errPayAlone) {
		return g.ledger.PayCheckout(ctx, g.pool, p)
	}
	return a.paid, a.posted, err
}

func (g *CheckoutGrouper) commit(_ string, _ *struct{}, group []*checkoutMember) {
	if len(group) == 1 {
		// Alone, on the drain (the next group gathers meanwhile), with PayCheckout's own statements,
		// cheaper than the set-based ones for one; a lock held elsewhere sends it to its own goroutine.
		m := group[0]
		paid, posted, err := g.ledger.payCheckout(m.ctx, g.pool, m.req, g.lockTimeout)
		if errors.Is(err, errLockWait) {
			err = errPayAlone
		}
		m.reply(checkoutAnswer{paid, posted}, err)
		return
	}
	// The group's transaction runs for many callers: none of their contexts may cancel it.
	ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
	defer cancel()
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
		posted, planned, err := g.payGroup(ctx, group)
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
func (g *CheckoutGrouper) payGroup(ctx context.Context, group []*checkoutMember) (posted []Posted, planned []bool, err error) {
	if citus, err := onCitus(ctx, g.pool); err != nil || citus {
		return nil, nil, cmp.Or(err, errPayAlone)
	}
	var (
		events  = dbsqlc.StripeEventsInsertGroupParams{}
		orders  = dbsqlc.TopupsPaySessionsParams{}
		credits = dbsqlc.LedgerInsertCreditsParams{}
	)
	for _, m := range group {
		e, o, c := m.req.Event, m.req.Order, m.req.Credit
		events.EventIDs = append(events.EventIDs, e.ID)
		events.Types = append(events.Types, e.Type)
		events.APIVersions = append(events.APIVersions, e.APIVersion)
		events.Livemodes = append(events.Livemodes, e.Livemode)
		events.Created = append(events.Created, e.Created)
		events.Payloads = append(events.Payloads, e.Payload)
		events.Outcomes = append(events.Outcomes, e.Outcome)
		events.PaymentIntents = append(events.PaymentIntents, e.PaymentIntent)
		orders.IDs = append(orders.IDs, o.ID)
		orders.AccountIDs = append(orders.AccountIDs, o.AccountID)
		orders.SessionIDs = append(orders.SessionIDs, o.SessionID)
		orders.PaymentIntents = append(orders.PaymentIntents, o.PaymentIntent)
		orders.PaidEventIDs = append(orders.PaidEventIDs, e.ID)
		orders.Amounts = append(orders.Amounts, o.Amount)
		orders.Currencies = append(orders.Currencies, o.Currency)
		credits.AccountIDs = append(credits.AccountIDs, o.AccountID)
		credits.Kinds = append(credits.Kinds, c.Kind)
		credits.Amounts = append(credits.Amounts, o.Amount)
		credits.Descriptions = append(credits.Descriptions, c.Description)
		credits.DedupeKeys = append(credits.DedupeKeys, c.DedupeKey)
		credits.PaymentIntents = append(credits.PaymentIntents, o.PaymentIntent)
	}
	var (
		recorded []string
		paid     []dbsqlc.TopupsPaySessionsRow
		entries  []dbsqlc.LedgerInsertCreditsRow
	)
	tx, errs, err := beginPipelined(ctx, g.pool, g.lockTimeout, []step{
		func(q *dbsqlc.Queries) (err error) {
			recorded, err = q.StripeEventsInsertGroup(ctx, events)
			return err
		},
		func(q *dbsqlc.Queries) error { return q.StripeEventsLockPayments(ctx, orders.PaymentIntents) },
		func(q *dbsqlc.Queries) (err error) { paid, err = q.TopupsPaySessions(ctx, orders); return err },
		func(q *dbsqlc.Queries) (err error) { entries, err = q.LedgerInsertCredits(ctx, credits); return err },
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
	paidBy := map[string]dbsqlc.TopupsPaySessionsRow{}
	for _, r := range paid {
		paidBy[r.SessionID] = r
	}
	entryBy := map[string]dbsqlc.LedgerInsertCreditsRow{}
	for _, r := range entries {
		entryBy[r.DedupeKey] = r
	}
	planned = make([]bool, len(group))
	posted = make([]Posted, len(group))
	all := true
	for i, m := range group {
		p := m.req
		order, orderPaid := paidBy[p.Order.SessionID]
		entry, credited := entryBy[p.Credit.DedupeKey]
		planned[i] = isRecorded[p.Event.ID] && orderPaid && order.AccountID == p.Order.AccountID && !order.ParkedWaiting && credited
		all = all && planned[i]
		posted[i] = p.credit(entry.ID, entry.CreatedAt, entry.Seq, entry.BalanceAfter)
	}
	if !all {
		return nil, planned, endPipelined(ctx, tx, false)
	}
	if err := g.ledger.Posted(ctx, tx, posted); err != nil {
		_ = endPipelined(ctx, tx, false)
		return nil, nil, err
	}
	if err := endPipelined(ctx, tx, true); err != nil {
		return nil, nil, fmt.Errorf("%w of %d: %w", errCommitFailed, len(group), err)
	}
	return posted, planned, nil
}
