package db

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// Spend limits (SPEC §16): caps per calendar period in UTC on the database clock, on the whole account
// or on one subject or feature of it. A window of a limit counts what holds in held reserve (held) and
// what captures and billed decisions spent (spent). A hard limit refuses, in the statement that inserts
// and reserves a hold (HoldsInsertGroup), any authorisation that would take a window past its cap; a
// decision billed without a hold is billed in full all the same, and what it takes past the cap is
// counted as over.

// Limit scopes, periods and modes, as spend_limits' checks know them.
const (
	ScopeAccount = "account"
	ScopeSubject = "subject"
	ScopeFeature = "feature"
	LimitHard    = "hard"
	LimitSoft    = "soft"
)

// ErrLimitExceeded: a hard limit's window would go past its cap. The error is a *LimitExceededError.
var ErrLimitExceeded = errors.New("spend limit exceeded")

// ErrLimitNotFound: the account has no limit with this id.
var ErrLimitNotFound = errors.New("spend limit not found")

// LimitExceededError names the hard limit that refused an authorisation, and what its window has left.
type LimitExceededError struct {
	LimitID     string
	Period      string
	WindowStart time.Time
	Remaining   int64 // max(0, cap - spent - held) of the window
}

func (e *LimitExceededError) Error() string {
	return fmt.Sprintf("%v: limit %s (%s from %s) has %d left", ErrLimitExceeded, e.LimitID, e.Period,
		e.WindowStart.UTC().Format(time.RFC3339), e.Remaining)
}

// Is makes errors.Is(err, ErrLimitExceeded) true.
func (e *LimitExceededError) Is(target error) bool { return target == ErrLimitExceeded }

// spendWindow is one limit of a locked account with its current window.
type spendWindow dbsqlc.SpendWindowsOpenRow

// applies says whether the limit counts a hold or decision of this subject and feature.
func (w spendWindow) applies(subject, feature string) bool {
	switch w.Scope {
	case ScopeSubject:
		return subject != "" && w.ScopeValue == subject
	case ScopeFeature:
		return feature != "" && w.ScopeValue == feature
	}
	return true
}

// spendWindows are a locked account's limits with their current windows, by limit id.
type spendWindows []spendWindow

// openWindows opens the current window of every limit of the locked account (SpendWindowsOpen) and
// returns them: what its authorisations are planned against. The statements that count keep the rule.
func openWindows(ctx context.Context, q *dbsqlc.Queries, accountID string) (spendWindows, error) {
	rows, err := q.SpendWindowsOpen(ctx, accountID)
	if err != nil {
		return nil, fmt.Errorf("open spend windows of %s: %w", accountID, MapError(err))
	}
	out := make(spendWindows, len(rows))
	for i, r := range rows {
		out[i] = spendWindow(r)
	}
	return out, nil
}

// refusal returns the *LimitExceededError of the first hard limit (by id) whose window cannot take the
// hold on top of what taken (by window, nil: nothing) already took, or nil when every one can.
func (ws spendWindows) refusal(r HoldRequest, taken []int64) error {
	for i, w := range ws {
		if w.Mode != LimitHard || !w.applies(r.Subject, r.Feature) {
			continue
		}
		used := w.Spent + w.Held
		if taken != nil {
			used += taken[i]
		}
		if used+r.Amount > w.Amount {
			return &LimitExceededError{LimitID: w.ID, Period: w.Period, WindowStart: w.WindowStart, Remaining: max(0, w.Amount-used)}
		}
	}
	return nil
}

// take counts an admitted hold in taken, for the windows that apply to it.
func (ws spendWindows) take(r HoldRequest, taken []int64) {
	for i, w := range ws {
		if w.applies(r.Subject, r.Feature) {
			taken[i] += r.Amount
		}
	}
}

// Limit is a spend limit with its current window.
type Limit struct {
	AccountID  string
	ID         string
	Scope      string
	ScopeValue string // empty for an account limit
	Period     string
	Amount     int64
	Mode       string
	CreatedAt  time.Time
	// The current window on the database clock: [WindowStart, WindowEnd).
	WindowStart, WindowEnd time.Time
	Spent, Held, Over      int64
}

// Remaining is what the current window has left: max(0, amount - spent - held).
func (l Limit) Remaining() int64 { return max(0, l.Amount-l.Spent-l.Held) }

// LimitDefinition is what PUT …/limits/{id} sets.
type LimitDefinition struct {
	Scope, ScopeValue, Period, Mode string
	Amount                          int64
}

// PutLimit creates the account's limit, or replaces its definition keeping what its windows counted.
// Errors: ErrAccountNotFound. The request's record (PendingAudit) commits with the limit.
func PutLimit(ctx context.Context, b Beginner, accountID, limitID string, d LimitDefinition) error {
	var value *string
	if d.ScopeValue != "" {
		value = &d.ScopeValue
	}
	return InAuditedTx(ctx, b, func(tx Tx) (bool, error) {
		_, err := dbsqlc.New(tx).SpendLimitsPut(ctx, dbsqlc.SpendLimitsPutParams{
			AccountID: accountID, ID: limitID, Scope: d.Scope, ScopeValue: value, Period: d.Period, Amount: d.Amount, Mode: d.Mode,
		})
		if err != nil {
			return false, fmt.Errorf("put limit %s of %s: %w", limitID, accountID, MapError(err))
		}
		return true, nil
	})
}

// DeleteLimit deletes the account's limit and its windows. Errors: ErrLimitNotFound. The request's
// record (PendingAudit) commits with the deletion.
func DeleteLimit(ctx context.Context, b Beginner, accountID, limitID string) error {
	return InAuditedTx(ctx, b, func(tx Tx) (bool, error) {
		n, err := dbsqlc.New(tx).SpendLimitsDelete(ctx, dbsqlc.SpendLimitsDeleteParams{AccountID: accountID, ID: limitID})
		if err != nil {
			return false, fmt.Errorf("delete limit %s of %s: %w", limitID, accountID, MapError(err))
		}
		if n == 0 {
			return false, fmt.Errorf("limit %s of %s: %w", limitID, accountID, ErrLimitNotFound)
		}
		return true, nil
	})
}

// Limits returns the account's limits by id, each with its current window.
func Limits(ctx context.Context, q Conn, accountID string) ([]Limit, error) {
	rows, err := dbsqlc.New(q).SpendLimitsWithWindows(ctx, accountID)
	if err != nil {
		return nil, fmt.Errorf("list limits of %s: %w", accountID, MapError(err))
	}
	out := make([]Limit, len(rows))
	for i, r := range rows {
		out[i] = Limit{
			AccountID: accountID, ID: r.ID, Scope: r.Scope, ScopeValue: r.ScopeValue, Period: r.Period, Amount: r.Amount,
			Mode: r.Mode, CreatedAt: r.CreatedAt, WindowStart: r.WindowStart, WindowEnd: r.WindowEnd,
			Spent: r.Spent, Held: r.Held, Over: r.Over,
		}
	}
	return out, nil
}

// countDecisions counts, in the billing transaction that posted them, what the billed decisions spent
// beyond the hold each captured (captures, from HoldsCaptureForDecisions, moved that part already) in
// the windows of the limits that apply, set-based, in one statement (SpendWindowsBill).
// Returns what hard limits' windows took past their caps.
func countDecisions(ctx context.Context, q *dbsqlc.Queries, posted []Entry, captures []DecisionHold) (int64, error) {
	captured := make(map[string]int64, len(captures))
	for _, c := range captures {
		captured[c.DecisionID] = min(c.Cost, c.Amount)
	}
	// A cascaded decision's parts (SPEC §18) count, all of them, on the member that spent: its limits
	// bound what it draws from any level. A pool's part is keyed decision:{id}@{pool_id}.
	type spend struct {
		account string
		amount  int64
	}
	var order []string
	spends := make(map[string]*spend, len(posted))
	for _, e := range posted {
		id, account := strings.TrimPrefix(e.DedupeKey, "decision:"), e.AccountID
		if e.OnBehalfOf != "" {
			id, account = strings.TrimSuffix(id, "@"+e.AccountID), e.OnBehalfOf
		}
		s, ok := spends[id]
		if !ok {
			s = &spend{account: account}
			spends[id] = s
			order = append(order, id)
		}
		s.amount -= e.Amount
	}
	var accounts, decisions []string
	var amounts []int64
	for _, id := range order {
		if spent := spends[id].amount - captured[id]; spent > 0 {
			accounts, decisions, amounts = append(accounts, spends[id].account), append(decisions, id), append(amounts, spent)
		}
	}
	if len(decisions) == 0 {
		return 0, nil
	}
	moved, err := q.SpendWindowsBill(ctx, dbsqlc.SpendWindowsBillParams{AccountIDs: accounts, DecisionIDs: decisions, Amounts: amounts})
	if err != nil {
		return 0, fmt.Errorf("count %d decisions in their spend windows: %w", len(decisions), MapError(err))
	}
	var over int64
	for _, m := range moved {
		over += m.OverNow
	}
	return over, nil
}

// LimitReached is a soft limit's window that reached its cap: one limit.reached notification each.
type LimitReached struct {
	AccountID, LimitID string
	WindowStart        time.Time
	Spent, Held        int64
	ReachedAt          time.Time
}

// TakeLimitsReached takes, in tx, the windows whose limit.reached is still to enqueue: they are marked
// enqueued, and the caller enqueues their notifications in the same tx, like TakeAlerts.
func TakeLimitsReached(ctx context.Context, tx Tx) ([]LimitReached, error) {
	rows, err := dbsqlc.New(tx).SpendWindowsTakeReached(ctx, outboxBatch)
	if err != nil {
		return nil, fmt.Errorf("take limits reached: %w", MapError(err))
	}
	out := make([]LimitReached, len(rows))
	for i, r := range rows {
		out[i] = LimitReached(r)
	}
	return out, nil
}

// limitViolations checks the spend windows (SPEC §16): each window's held is the sum of the holds
// still held counted in it; its spent is what the captures of its holds and the decisions billed in it
// spent.
func limitViolations(ctx context.Context, q *dbsqlc.Queries) ([]Violation, error) {
	var out []Violation
	held, err := q.SpendWindowsHeldMismatches(ctx)
	if err != nil {
		return nil, fmt.Errorf("check spend windows' held: %w", MapError(err))
	}
	for _, w := range held {
		out = append(out, Violation{"window_held", fmt.Sprintf("limit %s of %s, window %s: held %d, its holds in held sum to %d",
			w.LimitID, w.AccountID, w.WindowStart.UTC().Format(time.RFC3339), w.Held, w.HoldsSum)})
	}
	spent, err := q.SpendWindowsSpentMismatches(ctx)
	if err != nil {
		return nil, fmt.Errorf("check spend windows' spent: %w", MapError(err))
	}
	for _, w := range spent {
		out = append(out, Violation{"window_spent", fmt.Sprintf("limit %s of %s, window %s: spent %d, its captures and decisions spent %d",
			w.LimitID, w.AccountID, w.WindowStart.UTC().Format(time.RFC3339), w.Spent, w.Counted)})
	}
	return out, nil
}
