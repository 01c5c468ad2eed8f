package db

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// Poster posts entries with group commit. Every posting on one account serialises on that account's
// balance row, so one transaction per posting caps a hot account at one fsync'd commit per posting.
// Poster gathers the concurrent postings of one account for a few milliseconds and commits them in
// ONE transaction: one set-based insert under ledger_dedupe_idx that locks the account row, numbers
// the entries and carries their balance_after, the balance moved by ledger_chain. While an account is
// busy, each group is planned on the balance its previous group left, and its insert (which inserts
// only if the locked balance is still that) is sent with BEGIN: two round trips with COMMIT. A group
// without such a balance (the first of a busy spell, or one after a group that failed or posted alone)
// locks the row and reads the balance first; one whose insert found the balance moved (another path or
// process posted meanwhile) locks it then, and is planned again in the same transaction.
//
// To each caller, Post is exactly one InTx + Ledger.Post: an exact replay is Posted=false with the
// original entry, a key reused with other parameters is ErrDedupeConflict, a no-overdraw posting that
// does not fit is ErrInsufficientBalance, one that would carry the balance beyond a bigint is
// ErrOutOfRange, and the answer comes only after the group committed. A stored key is answered as a
// replay or a conflict before admission is considered, as Ledger.Post looks the key up before it
// reports a refusal: a retried debit is a replay however the balance moved since. One member's refusal never
// fails the others: admission is computed in arrival order against the locked balance, and only
// admitted postings are inserted. The database holds the no-overdraw rule for the group too: its one
// insert (LedgerInsertGroup) inserts nothing unless the running balance after each admitted
// no-overdraw entry stays at or above zero, so a wrong plan fails the group (whose members then post
// one by one) and never overdraws. When the group transaction fails as a whole with a
// transient error, every member gets that error; any other failure of the group (an invalid amount, a
// missing account, an OnPosted error) is resolved by posting its members one transaction each, so that
// each gets the answer its own transaction would have given.
//
// Grouping is per process: postings of one account through two processes still serialise on the row
// lock, each group as one transaction, which is correct and only slower (each process's groups also find
// the balance moved by the other's, and cost a round trip more).
type Poster struct {
	pool   *Pool
	ledger Ledger
	queue  *groupQueue[Posting, Posted, lastBalance]
}

// lastBalance is the balance an account's last group left, when known: what its next group is planned
// on. It is remembered while the account's drain runs (groupQueue's memo).
type lastBalance struct {
	balance int64
	known   bool
}

// PosterOptions tunes grouping; the zero value takes the defaults.
type PosterOptions struct {
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

// NewPoster returns a Poster that posts through ledger (so that OnPosted rides along) on pool.
func NewPoster(pool *Pool, ledger Ledger, o PosterOptions) *Poster {
	s := &Poster{pool: pool, ledger: ledger}
	s.queue = newGroupQueue(o.Window, o.MaxGroup, s.commit)
	return s
}

// member is one posting waiting for, or in, a group; outcome is its answer.
type (
	member  = groupMember[Posting, Posted]
	outcome = groupAnswer[Posted]
)

// Post posts p in the next group of its account and returns once that group committed (or failed).
// When ctx ends before the group took p, nothing is posted and ctx's error is returned; once taken,
// p's outcome is awaited, as a commit cannot be called back.
func (s *Poster) Post(ctx context.Context, p Posting) (Posted, error) {
	return s.queue.do(ctx, p.AccountID, p)
}

// errPostAlone: the group cannot be planned as one (its account is missing); each member's own
// transaction gives its exact answer.
var errPostAlone = errors.New("post the group's members one by one")

// errRegroup: a key the group meant to insert was already taken (posted before, or meanwhile by
// another transaction); the transaction rolled back and the group is planned again, keys read first.
var errRegroup = errors.New("plan the group again")

func (s *Poster) commit(_ string, last *lastBalance, group []*member) {
	ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
	defer cancel()
	from := *last
	// Known again only once a group committed: any other path may have moved the balance.
	*last = lastBalance{}
	if len(group) == 1 {
		s.postAlone(ctx, group[0])
		return
	}
	var (
		outcomes []outcome
		balance  int64
		err      error
		readKeys bool // the first attempt assumes every key is new, the common case
	)
	for range regroupAttempts {
		outcomes, balance, err = s.postGroup(ctx, group, readKeys, from)
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
		for i, m := range group {
			// Posted entries were counted by Ledger.Posted; replays and conflicts settled in the group
			// are counted here, as Post counts them.
			if o := outcomes[i]; !o.ans.Posted {
				s.ledger.observeTaken(m.req.Kind, o.err)
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
			s.postAlone(ctx, m)
		}
	}
}

// postAlone is the plain path: one transaction, one Ledger.Post.
func (s *Poster) postAlone(ctx context.Context, m *member) {
	var out Posted
	err := InTx(ctx, s.pool, func(tx Tx) error {
		var err error
		out, err = s.ledger.Post(ctx, tx, m.req)
		return err
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

// postGroup runs one group in one transaction and returns each member's outcome, in group order, and
// the balance the group left. With from known, the group is planned on that balance and its insert is
// sent with BEGIN, in one round trip; when the insert returns no row (the balance is no longer from,
// the account is gone, or every key it meant to insert was taken), the row is locked and the group
// planned again in the same transaction. Without from, BEGIN and the lock go in one round trip, then
// the plan and the insert. With readKeys, the entries already posted under the group's keys are read
// first, so that replays and conflicts are planned as such; without, every key is assumed new and a
// taken one (found by the insert, which then returns no row for it) rolls the group back with
// errRegroup. Skipping the read keeps the common case at one statement per step, and its plan safe on
// a ledger without statistics.
func (s *Poster) postGroup(ctx context.Context, group []*member, readKeys bool, from lastBalance) ([]outcome, int64, error) {
	account := group[0].req.AccountID
	// On Citus the group's set-based insert has no equivalent yet (citus_ledger.go): one by one.
	if citus, err := onCitus(ctx, s.pool); err != nil || citus {
		return nil, 0, cmp.Or(err, errPostAlone)
	}
	var (
		plan    groupPlan
		start   int64
		rows    []dbsqlc.LedgerInsertGroupRow
		onLast  = from.known && !readKeys
		stmtErr error
	)
	if onLast {
		plan = planGroup(group, from.balance, nil)
		// A refusal on a remembered balance is not final (see refusedKeys): plan on the locked row.
		onLast = len(plan.insert) > 0 && len(plan.refusedKeys(group)) == 0
	}
	first := func(q *dbsqlc.Queries) error {
		start, stmtErr = q.AccountsLockForGroup(ctx, account)
		return stmtErr
	}
	if onLast {
		arg := groupInsertArgs(group, plan.insert, from.balance)
		first = func(q *dbsqlc.Queries) error {
			rows, stmtErr = q.LedgerInsertGroup(ctx, arg)
			return stmtErr
		}
	}
	tx, _, err := beginPipelined(ctx, s.pool, 0, []step{first})
	if err != nil {
		return nil, 0, err
	}
	committing := false
	defer func() {
		// Every way out but the commit below rolls back, a panic included.
		if !committing {
			_ = endPipelined(ctx, tx, false)
		}
	}()
	q := dbsqlc.New(tx)

	if onLast && stmtErr == nil && len(rows) == 0 {
		// The balance moved since the previous group, the account is gone, or every key was taken
		// meanwhile (the insert on the locked row then finds that, as without a remembered balance).
		onLast = false
		start, stmtErr = q.AccountsLockForGroup(ctx, account)
	}
	if !onLast {
		if isNoRows(stmtErr) {
			return nil, 0, errPostAlone
		}
		if stmtErr != nil {
			return nil, 0, fmt.Errorf("lock account %s: %w", account, stmtErr)
		}
		if plan, err = planLocked(ctx, q, group, readKeys, start); err != nil {
			return nil, 0, err
		}
		rows, stmtErr = nil, nil
		if len(plan.insert) > 0 {
			rows, stmtErr = q.LedgerInsertGroup(ctx, groupInsertArgs(group, plan.insert, start))
		}
	}
	inserted, err := groupEntries(group, plan.insert, rows, stmtErr)
	if err != nil {
		return nil, 0, err
	}
	if n := len(inserted); n > 0 && inserted[n-1].BalanceAfter != plan.balance {
		return nil, 0, fmt.Errorf("balance of %s moved under the group's lock: %d, expected %d", account, inserted[n-1].BalanceAfter, plan.balance)
	}

	outcomes := plan.outcomes
	posted := make([]Posted, len(plan.insert))
	for k, i := range plan.insert {
		outcomes[i] = outcome{ans: Posted{Entry: inserted[k], Posted: true, Balance: inserted[k].BalanceAfter}}
		posted[k] = outcomes[i].ans
	}
	for i, first := range plan.duplicateOf {
		outcomes[i] = settled(replayOrConflict(outcomes[first].ans.Entry, group[i].req))
	}
	if err := s.ledger.Posted(ctx, tx, posted); err != nil {
		return nil, 0, err
	}
	committing = true
	if err := endPipelined(ctx, tx, true); err != nil {
		return nil, 0, err
	}
	return outcomes, plan.balance, nil
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
		stored[*r.DedupeKey] = entryFromRow(r)
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

// groupInsertArgs are LedgerInsertGroup's arguments for the members insert, planned on start.
func groupInsertArgs(group []*member, insert []int, start int64) dbsqlc.LedgerInsertGroupParams {
	arg := dbsqlc.LedgerInsertGroupParams{AccountID: group[insert[0]].req.AccountID, StartBalance: start}
	for _, i := range insert {
		p := group[i].req
		arg.Kinds = append(arg.Kinds, p.Kind)
		arg.Amounts = append(arg.Amounts, p.Amount)
		arg.Descriptions = append(arg.Descriptions, p.Description)
		arg.DedupeKeys = append(arg.DedupeKeys, p.DedupeKey)
		arg.PaymentIntents = append(arg.PaymentIntents, p.PaymentIntent)
		arg.NoOverdraw = append(arg.NoOverdraw, p.NoOverdraw)
	}
	return arg
}

// groupEntries turns what LedgerInsertGroup returned for the members insert into their entries, in
// the order of insert. A key posted meanwhile by another transaction returns no row for it, or breaks
// the chain (ledger_chain) when it was not the last: errRegroup. So does a plan whose no-overdraw
// admissions the statement refused (no row at all): planned again it fails again, and then its
// members post one by one.
func groupEntries(group []*member, insert []int, rows []dbsqlc.LedgerInsertGroupRow, err error) ([]Entry, error) {
	if len(insert) == 0 {
		return nil, nil
	}
	if errors.Is(MapError(err), ErrChainBroken) {
		return nil, errRegroup
	}
	if err != nil {
		return nil, fmt.Errorf("insert %d entries for %s: %w", len(insert), group[insert[0]].req.AccountID, err)
	}
	if len(rows) != len(insert) {
		return nil, errRegroup
	}
	// Ids are drawn in array order, so sorting by id pairs each row with its member; the keys check it.
	slices.SortFunc(rows, func(a, b dbsqlc.LedgerInsertGroupRow) int { return cmp.Compare(a.ID, b.ID) })
	entries := make([]Entry, len(rows))
	for k, i := range insert {
		p := group[i].req
		if deref(rows[k].DedupeKey) != p.DedupeKey {
			return nil, fmt.Errorf("inserted entries came back out of order: row %d has key %q, expected %q", rows[k].ID, deref(rows[k].DedupeKey), p.DedupeKey)
		}
		entries[k] = Entry{
			ID: rows[k].ID, AccountID: p.AccountID, Kind: p.Kind, Amount: p.Amount, Description: p.Description,
			DedupeKey: p.DedupeKey, PaymentIntent: p.PaymentIntent, CreatedAt: rows[k].CreatedAt,
			Seq: rows[k].Seq, BalanceAfter: rows[k].BalanceAfter,
		}
	}
	return entries, nil
}

// settled wraps one member's answer.
func settled(posted Posted, err error) outcome { return outcome{ans: posted, err: err} }
