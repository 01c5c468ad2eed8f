package db

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// PostGrouped posts p in a transaction of its own, grouped with the concurrent postings of its account:
// every posting on one account serialises on that account's balance row, so one transaction per
// posting caps a hot account at one fsync'd commit per posting. The Ledger gathers the concurrent
// postings of one account for a few milliseconds and commits them in ONE transaction, through the one
// road (LedgerAppend). While an account is busy, each group is planned on the balance its previous group
// left, and its append (which locks and inserts only if the balance is still that) is sent with BEGIN:
// two round trips with COMMIT, and one more for the audit records of the requests it posted (their
// PendingAudit, one statement for the group). A group without such a balance (the first of a busy
// spell, or one after a group that failed or posted alone) locks the row and reads the balance first;
// one whose append found the balance moved (another path or process posted meanwhile) locks it then,
// and is planned again in the same transaction.
//
// To each caller, PostGrouped is exactly one InTx + Post: an exact replay is New=false with the original
// entry, a key reused with other parameters is ErrDedupeConflict, a no-overdraw posting that does not fit
// is ErrInsufficientBalance, one that would carry the balance beyond a bigint is ErrOutOfRange, and the
// answer comes only after the group committed. A stored key is answered as a replay or a conflict before
// admission is considered, as Post looks the key up before it reports a refusal: a retried debit is a
// replay however the balance moved since. One member's refusal never fails the others: admission is
// computed in arrival order against the locked balance, and only admitted postings are inserted. The
// database holds the no-overdraw rule for the group too: ledger_append inserts none of the account's rows
// if the running balance after an admitted no-overdraw entry would be below zero, so a wrong plan fails
// the group (whose members then post one by one) and never overdraws. When the group transaction fails
// as a whole with a transient error, every member gets that error; any other failure of the group (an
// invalid amount, a missing account, an OnPosted error) is resolved by posting its members one
// transaction each, so that each gets the answer its own transaction would have given. When ctx ends
// before the group took p, nothing is posted and ctx's error is returned; once taken, p's outcome is
// awaited, as a commit cannot be called back. The record pending in ctx (PendingAudit) commits with
// p's entry, in whichever transaction posts it.
//
// Grouping is per process: postings of one account through two processes still serialise on the row
// lock, each group as one transaction, which is correct and only slower.
func (l *Ledger) PostGrouped(ctx context.Context, p Posting) (Posted, error) {
	return l.postings.do(ctx, p.AccountID, p)
}

// lastBalance is the balance an account's last group left, when known: what its next group is planned
// on. It is remembered while the account's drain runs (groupQueue's memo).
type lastBalance struct {
	balance int64
	known   bool
}

// GroupOptions tunes group commit; the zero value takes the defaults.
type GroupOptions struct {
	// Window is how long the oldest waiting posting of an account waits for others before its group
	// commits (default 2ms). Postings that arrived while the account's previous group was committing
	// have waited that long already and commit at once, and so does a group as large as the last one.
	Window time.Duration
	// MaxGroup caps the postings in one transaction (default 256); a full group commits at once.
	MaxGroup int
}

const (
	defaultGroupWindow = 2 * time.Millisecond
	defaultMaxGroup    = 256
	// groupTimeout bounds one group's transaction: it runs on behalf of many callers, so no single
	// caller's context may cancel it.
	groupTimeout = 15 * time.Second
	// regroupAttempts bounds retries of a group that found a key taken or lost a deadlock; then its
	// members post one by one.
	regroupAttempts = 3
)

// member is one posting waiting for, or in, a group; outcome is its answer.
type (
	member  = groupMember[Posting, Posted]
	outcome = groupAnswer[Posted]
)

// errPostAlone: the group cannot be planned as one (its account is missing); each member's own
// transaction gives its exact answer.
var errPostAlone = errors.New("post the group's members one by one")

// errRegroup: a key the group meant to insert was already taken (posted before, or meanwhile by
// another transaction); the transaction rolled back and the group is planned again, keys read first.
var errRegroup = errors.New("plan the group again")

func (l *Ledger) commitPostings(_ string, last *lastBalance, group []*member) {
	ctx, cancel, span := groupContext(l.cfg.Tracing, "group_commit.postings", group)
	defer cancel()
	defer span.End()
	from := *last
	// Known again only once a group committed: any other path may have moved the balance.
	*last = lastBalance{}
	if len(group) == 1 || slices.ContainsFunc(group, restores) {
		// A restore's at-once expiry of a refilled lot follows its restore's statement: in a group it
		// would come after the members behind the restore, so a group holding one posts one by one.
		for _, m := range group {
			l.postAlone(ctx, m)
		}
		return
	}
	var (
		outcomes []outcome
		balance  int64
		audited  []*PendingAudit
		err      error
		readKeys bool // the first attempt assumes every key is new, the common case
	)
	for range regroupAttempts {
		outcomes, balance, audited, err = l.postGroup(ctx, group, readKeys, from)
		// A retry locks the row and reads the balance first.
		from = lastBalance{}
		if errors.Is(err, errRegroup) {
			readKeys = true
			continue
		}
		if !lostLockRace(err) {
			break
		}
	}
	switch {
	case err == nil:
		*last = lastBalance{balance: balance, known: true}
		markWritten(audited)
		for i, m := range group {
			// Inserted entries were counted by inserted; replays and conflicts settled in the group are
			// counted here, as Post counts them.
			if o := outcomes[i]; !o.ans.New {
				l.observeTaken(m.req.Kind, o.err)
				if o.err == nil {
					PendingAuditOf(m.ctx).markReplay()
				}
			}
			m.answer <- outcomes[i]
		}
	case IsTransient(err) && !lostLockRace(err):
		// Callers branch on the sentinel (503, retry later); a group's own statements are not mapped,
		// since any other failure of theirs is resolved member by member below.
		if !errors.Is(err, ErrTransient) {
			err = fmt.Errorf("%w: %w", ErrTransient, err)
		}
		for _, m := range group {
			m.answer <- outcome{err: err}
		}
	default:
		for _, m := range group {
			l.postAlone(ctx, m)
		}
	}
}

// restores reports a restore (refund_restore, dispute_won): its statement may post an expiry of its own.
func restores(m *member) bool {
	return m.req.Kind == KindRefundRestore || m.req.Kind == KindDisputeWon
}

// postAlone is the plain path: one transaction, one Post, and the record of the member's request when
// it posted.
func (l *Ledger) postAlone(ctx context.Context, m *member) {
	var out Posted
	err := inAuditedTx(ctx, l.pool, PendingAuditOf(m.ctx), func(tx Tx) (bool, error) {
		var err error
		out, err = l.Post(ctx, tx, m.req)
		return out.New, err
	})
	m.answer <- outcome{ans: out, err: err}
}

// lostLockRace reports a deadlock or serialization failure: the group rolled back and may simply run
// again (another transaction may hold a key the group inserts while it waits for the group's account).
func lostLockRace(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) &&
		(pgErr.Code == pgerrcode.DeadlockDetected || pgErr.Code == pgerrcode.SerializationFailure)
}

// postGroup runs one group in one transaction and returns each member's outcome, in group order, the
// balance the group left, and the pending records (PendingAudit) of the members it posted, appended in
// one statement before the commit. With from known, the group is planned on that balance and its append
// is sent with BEGIN and its records, in one round trip; when the append returns no row (the balance is
// no longer from, the account is gone, or every key it meant to insert was taken), that transaction rolls
// back and the group is planned again on the locked row. Without from, BEGIN and the lock go in one round
// trip, then the plan, the append and the records. With readKeys, the entries already posted under the
// group's keys are read first, so that replays and conflicts are planned as such; without, every key is
// assumed new and a taken one (left out by the append) rolls the group back with errRegroup. Skipping
// the read keeps the common case at one statement per step.
func (l *Ledger) postGroup(ctx context.Context, group []*member, readKeys bool, from lastBalance) ([]outcome, int64, []*PendingAudit, error) {
	account := group[0].req.AccountID
	var (
		plan    groupPlan
		start   int64
		rows    []dbsqlc.LedgerAppendRow
		onLast  = from.known && !readKeys
		stmtErr error
		audited []*PendingAudit // the records sent with the append on the remembered balance
	)
	if onLast {
		plan = planGroup(group, from.balance, nil)
		// A refusal on a remembered balance is not final (see refusedKeys): plan on the locked row.
		onLast = len(plan.insert) > 0 && len(plan.refusedKeys(group)) == 0
	}
	lock := func(q *dbsqlc.Queries) error {
		start, stmtErr = lockGroupAccount(ctx, q, account)
		return stmtErr
	}
	steps := []step{lock}
	if onLast {
		arg := l.appendArgs(plan.postings(group), &from.balance)
		steps = []step{func(q *dbsqlc.Queries) error {
			rows, stmtErr = q.LedgerAppend(ctx, arg)
			return stmtErr
		}}
		// The records of the members it posts go in the same round trip: after a failed append
		// PostgreSQL skips them, and an append that posted nothing rolls them back below.
		if recs, appended := effectRecords(plan.effects(group)); len(recs) > 0 {
			steps = append(steps, func(q *dbsqlc.Queries) error { return auditInsert(ctx, q, recs) })
			audited = appended
		}
	}
	tx, errs, err := beginPipelined(ctx, l.pool, 0, steps)
	if err != nil {
		return nil, 0, nil, err
	}
	ended := false
	defer func() {
		// Every way out but the commit below rolls back, a panic included.
		if !ended {
			_ = endPipelined(ctx, tx, false)
		}
	}()
	q := dbsqlc.New(tx)

	if onLast && stmtErr == nil && len(rows) == 0 {
		// The balance moved since the previous group, the account is gone, or every key was taken
		// meanwhile: the group is planned again on the locked row (as without a remembered balance),
		// in a transaction of its own, without the records sent with the append.
		ended = true
		_ = endPipelined(ctx, tx, false)
		return l.postGroup(ctx, group, false, lastBalance{})
	}
	if onLast && stmtErr == nil && len(errs) > 1 && errs[1] != nil {
		return nil, 0, nil, errs[1]
	}
	if !onLast {
		if errors.Is(stmtErr, errNoAccount) {
			return nil, 0, nil, errPostAlone
		}
		if stmtErr != nil {
			return nil, 0, nil, fmt.Errorf("lock account %s: %w", account, stmtErr)
		}
		if plan, err = planLocked(ctx, q, group, readKeys, start); err != nil {
			return nil, 0, nil, err
		}
		rows, stmtErr = nil, nil
		if len(plan.insert) > 0 {
			rows, stmtErr = q.LedgerAppend(ctx, l.appendArgs(plan.postings(group), nil))
		}
	}
	entries, inserted, err := groupEntries(group, plan.insert, rows, stmtErr)
	if err != nil {
		return nil, 0, nil, err
	}
	if n := len(inserted); n > 0 && inserted[n-1].BalanceAfter != plan.balance {
		return nil, 0, nil, fmt.Errorf("balance of %s moved under the group's lock: %d, expected %d", account, inserted[n-1].BalanceAfter, plan.balance)
	}

	outcomes := plan.outcomes
	for k, i := range plan.insert {
		outcomes[i] = outcome{ans: Posted{Entry: inserted[k], New: true}}
	}
	for i, first := range plan.duplicateOf {
		outcomes[i] = settled(replayOrConflict(outcomes[first].ans.Entry, group[i].req))
	}
	if err := l.inserted(ctx, tx, entries); err != nil {
		return nil, 0, nil, err
	}
	if !onLast {
		if audited, err = recordEffects(ctx, tx, plan.effects(group)...); err != nil {
			return nil, 0, nil, err
		}
	}
	ended = true
	if err := endPipelined(ctx, tx, true); err != nil {
		return nil, 0, nil, err
	}
	return outcomes, plan.balance, audited, nil
}

// errNoAccount: the account to lock does not exist.
var errNoAccount = errors.New("account not found")

// lockGroupAccount locks one account (AccountsLock) and returns its balance; errNoAccount when it does
// not exist.
func lockGroupAccount(ctx context.Context, q *dbsqlc.Queries, account string) (int64, error) {
	locked, err := q.AccountsLock(ctx, []string{account})
	if err != nil {
		return 0, err
	}
	if len(locked) == 0 {
		return 0, errNoAccount
	}
	return locked[0].Balance, nil
}

// planLocked plans the group on start, the balance of the row its transaction locked. With readKeys, the
// entries already posted under the group's keys are read first.
func planLocked(ctx context.Context, q *dbsqlc.Queries, group []*member, readKeys bool, start int64) (groupPlan, error) {
	stored := map[string]Entry{}
	var err error
	if readKeys {
		if stored, err = storedEntries(ctx, q, groupKeys(group)); err != nil {
			return groupPlan{}, err
		}
	}
	plan := planGroup(group, start, stored)
	if keys := plan.refusedKeys(group); !readKeys && len(keys) > 0 {
		// A refusal is final only for a key never posted: a retry of a posted debit is a replay (or a
		// conflict), whatever the balance is now. Refused members move nothing, so reading their keys
		// and planning again changes nothing for the others but their duplicates.
		if stored, err = storedEntries(ctx, q, keys); err != nil {
			return groupPlan{}, err
		}
		plan = planGroup(group, start, stored)
	}
	return plan, nil
}

// groupKeys returns the group's dedupe keys.
func groupKeys(group []*member) []string {
	var keys []string
	for _, m := range group {
		if m.req.DedupeKey != "" {
			keys = append(keys, m.req.DedupeKey)
		}
	}
	return keys
}

// storedEntries returns the entries already posted under keys, by key.
func storedEntries(ctx context.Context, q *dbsqlc.Queries, keys []string) (map[string]Entry, error) {
	stored := map[string]Entry{}
	if len(keys) == 0 {
		return stored, nil
	}
	rows, err := q.LedgerListByDedupeKeys(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("read entries for %d dedupe keys: %w", len(keys), err)
	}
	for _, r := range rows {
		stored[*r.DedupeKey] = entryFromRow(dbsqlc.LedgerGetByDedupeKeyRow(r))
	}
	return stored, nil
}

// groupPlan is what one group will do, decided in arrival order against the locked balance.
type groupPlan struct {
	outcomes    []outcome   // final for members that are neither inserted nor duplicates
	insert      []int       // members to insert, in order
	duplicateOf map[int]int // member → the earlier member of the group that claims its key
	balance     int64       // the balance once every inserted member is posted
}

// refusedKeys returns the dedupe keys of the members a plan made without stored entries refused (the
// balance would go below zero or beyond a bigint): its only errors.
func (plan groupPlan) refusedKeys(group []*member) []string {
	var keys []string
	for i, o := range plan.outcomes {
		if o.err != nil && group[i].req.DedupeKey != "" {
			keys = append(keys, group[i].req.DedupeKey)
		}
	}
	return keys
}

// effects are the pending records (PendingAudit) of the members plan inserts, in order.
func (plan groupPlan) effects(group []*member) []*PendingAudit {
	effects := make([]*PendingAudit, len(plan.insert))
	for k, i := range plan.insert {
		effects[k] = PendingAuditOf(group[i].ctx)
	}
	return effects
}

// planGroup is the sequence of single postings, replayed in memory: each member sees the balance
// left by the admitted members before it, and a key claimed earlier in the group makes it a replay
// or a conflict of that member. A refused member claims nothing, as its own transaction would have
// rolled back.
func planGroup(group []*member, start int64, stored map[string]Entry) groupPlan {
	plan := groupPlan{outcomes: make([]outcome, len(group)), duplicateOf: map[int]int{}, balance: start}
	claimed := map[string]int{}
	for i, m := range group {
		p := m.req
		if p.DedupeKey != "" {
			if prior, ok := stored[p.DedupeKey]; ok {
				plan.outcomes[i] = settled(replayOrConflict(prior, p))
				continue
			}
			if first, ok := claimed[p.DedupeKey]; ok {
				plan.duplicateOf[i] = first
				continue
			}
		}
		// Checked: a sum beyond a bigint is what the member's own balance update would refuse.
		balance, ok := addInt64(plan.balance, p.Amount)
		if !ok {
			plan.outcomes[i] = outcome{err: fmt.Errorf("post %d to %s: %w", p.Amount, p.AccountID, ErrOutOfRange)}
			continue
		}
		// The same condition as LedgerInsert's no_overdraw, on the balance this member would see.
		if p.NoOverdraw && balance < 0 {
			plan.outcomes[i] = outcome{err: fmt.Errorf("post %d to %s: %w", p.Amount, p.AccountID, ErrInsufficientBalance)}
			continue
		}
		plan.balance = balance
		if p.DedupeKey != "" {
			claimed[p.DedupeKey] = i
		}
		plan.insert = append(plan.insert, i)
	}
	return plan
}

// postings are the members the plan inserts, in order.
func (plan groupPlan) postings(group []*member) []Posting {
	out := make([]Posting, len(plan.insert))
	for k, i := range plan.insert {
		out[k] = group[i].req
	}
	return out
}

// groupEntries turns what LedgerAppend returned for the members insert into every entry inserted and,
// in the order of insert, each member's entry. A key posted meanwhile by another transaction is left
// out, or breaks the chain (ledger_chain) when it was not the last: errRegroup. So does a plan whose
// no-overdraw admissions the statement refused (no row at all): planned again it fails again, and then
// its members post one by one.
func groupEntries(group []*member, insert []int, rows []dbsqlc.LedgerAppendRow, err error) (entries, inserted []Entry, _ error) {
	if len(insert) == 0 {
		return nil, nil, nil
	}
	if errors.Is(MapError(err), ErrChainBroken) {
		return nil, nil, errRegroup
	}
	if err != nil {
		return nil, nil, fmt.Errorf("insert %d entries for %s: %w", len(insert), group[insert[0]].req.AccountID, err)
	}
	entries, byRow := appended(rows, len(insert))
	inserted = make([]Entry, len(insert))
	for k := range insert {
		if byRow[k] == nil {
			return nil, nil, errRegroup
		}
		inserted[k] = *byRow[k]
	}
	return entries, inserted, nil
}

// settled wraps one member's answer.
func settled(posted Posted, err error) outcome { return outcome{ans: posted, err: err} }
