package db

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// Violation is one broken invariant, described for an operator.
type Violation struct {
	Check  string // which invariant
	Detail string // what breaks it, naming the account, key, payment or event
}

func (v Violation) String() string { return v.Check + ": " + v.Detail }

// Verify checks every invariant the ledger promises (SPEC §8) and returns each violation found; an
// empty result means the ledger is sound. parkedAfter is how long a parked event may wait unreviewed;
// holdGrace how long a hold may stay held, or a lot stay open, past its expiry (two reconcile
// intervals).
func Verify(ctx context.Context, q Conn, now time.Time, parkedAfter, holdGrace time.Duration) ([]Violation, error) {
	queries := dbsqlc.New(q)
	var out []Violation

	balances, err := queries.AccountsBalanceMismatches(ctx)
	if err != nil {
		return nil, fmt.Errorf("check balances: %w", MapError(err))
	}
	for _, b := range balances {
		out = append(out, Violation{"balance", fmt.Sprintf("account %s: cached balance %d (last seq %d), ledger sum %d, last entry's balance_after %d (seq %d)",
			b.ID, b.Cached, b.LastSeq, b.LedgerSum, b.LastBalanceAfter, b.LedgerLastSeq)})
	}

	breaks, err := queries.LedgerChainBreaks(ctx)
	if err != nil {
		return nil, fmt.Errorf("check balance chains: %w", MapError(err))
	}
	for _, c := range breaks {
		out = append(out, Violation{"chain", fmt.Sprintf("account %s: entry %d (seq %d, amount %d) has balance_after %d, want seq %d and balance_after %d",
			c.AccountID, c.ID, c.Seq, c.Amount, c.BalanceAfter, c.ExpectedSeq, c.ExpectedBalanceAfter)})
	}

	dupes, err := queries.LedgerDuplicateDedupeKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("check dedupe keys: %w", MapError(err))
	}
	for _, d := range dupes {
		out = append(out, Violation{"dedupe", fmt.Sprintf("key %q is held by %d entries", d.DedupeKey, d.Entries)})
	}

	cascades, err := queries.LedgerCascadeMismatches(ctx)
	if err != nil {
		return nil, fmt.Errorf("check cascades: %w", MapError(err))
	}
	for _, c := range cascades {
		out = append(out, Violation{"cascade", fmt.Sprintf("member %s, %s: its pools paid part, but the member has %d entries of it and the parts sum to %d, billed %d",
			c.Member, c.Effect, c.MemberEntries, c.Paid, c.Billed)})
	}

	payments, err := queries.LedgerOverReversedPayments(ctx)
	if err != nil {
		return nil, fmt.Errorf("check reversals: %w", MapError(err))
	}
	for _, p := range payments {
		out = append(out, Violation{"reversals", fmt.Sprintf("payment %s: reversed %d of a %d credit", p.PaymentIntent, p.NetReversed, p.Credited)})
	}

	unbillable, err := UnbillableAccounts(ctx, q, 0, math.MaxInt64)
	if err != nil {
		return nil, err
	}
	for _, u := range unbillable {
		out = append(out, Violation{"unbillable", fmt.Sprintf("account %s: %d decisions costing %s in all cannot be billed (from seq %d): the balance would leave a bigint",
			u.AccountID, u.Decisions, u.TotalCost, u.FirstSeq)})
	}

	parked, err := queries.StripeEventsParkedUnreviewed(ctx, now.Add(-parkedAfter))
	if err != nil {
		return nil, fmt.Errorf("check parked events: %w", MapError(err))
	}
	for _, e := range parked {
		out = append(out, Violation{"parked", fmt.Sprintf("event %s (%s) parked as %s since %s, not reviewed",
			e.EventID, e.Type, e.ParkedReason, e.ReceivedAt.UTC().Format(time.RFC3339))})
	}

	holds, err := holdViolations(ctx, queries, holdGrace)
	if err != nil {
		return nil, err
	}
	out = append(out, holds...)

	limits, err := limitViolations(ctx, queries)
	if err != nil {
		return nil, err
	}
	out = append(out, limits...)

	lots, err := lotViolations(ctx, queries, holdGrace)
	if err != nil {
		return nil, err
	}
	out = append(out, lots...)

	revenue, err := revenueViolations(ctx, queries)
	if err != nil {
		return nil, err
	}
	return append(out, revenue...), nil
}

// revenueViolations checks revenue recognition (SPEC §19): every recognition row is what its movement
// booked, every movement of a priced lot is booked once and in full, every lot has recognised the cost
// its drawn credits used up, and per currency the rollforward (purchased - recognised - breakage -
// refunded - disputed + restored) closes on the unrecognised cost of the open lots.
func revenueViolations(ctx context.Context, queries *dbsqlc.Queries) ([]Violation, error) {
	var out []Violation
	rows, err := queries.RevenueRecognitionsRowMismatches(ctx)
	if err != nil {
		return nil, fmt.Errorf("check recognitions: %w", MapError(err))
	}
	for _, r := range rows {
		out = append(out, Violation{"recognition", fmt.Sprintf("account %s: lot %d, entry %d (%s, posted by %d): %s of %d credits to %d drawn books %d, want %d",
			r.AccountID, r.LotID, r.EntryID, r.EntryKind, r.PostingEntryID, r.Kind, r.Credits, r.DrawnAfter, r.Amount, r.Expected)})
	}
	movements, err := queries.RevenueRecognitionsMovementMismatches(ctx)
	if err != nil {
		return nil, fmt.Errorf("check recognised movements: %w", MapError(err))
	}
	for _, m := range movements {
		out = append(out, Violation{"recognition", fmt.Sprintf("account %s: lot %d, entry %d moved %d credits, its recognitions count %d",
			m.AccountID, m.LotID, m.EntryID, m.Moved, m.Booked)})
	}
	lots, err := queries.RevenueRecognitionsLotMismatches(ctx)
	if err != nil {
		return nil, fmt.Errorf("check lots' recognitions: %w", MapError(err))
	}
	for _, l := range lots {
		out = append(out, Violation{"recognition", fmt.Sprintf("account %s: lot %d (amount %d, remaining %d, cost %d) recognised %d, want %d",
			l.AccountID, l.LotID, l.Amount, l.Remaining, l.CostAmount, l.Recognised, l.Expected)})
	}
	currencies, err := queries.RevenueRollforward(ctx)
	if err != nil {
		return nil, fmt.Errorf("check the revenue rollforward: %w", MapError(err))
	}
	for _, c := range currencies {
		if c.Closing != c.Deferred {
			out = append(out, Violation{"rollforward", fmt.Sprintf("%s: purchased %d - recognised %d - breakage %d - refunded %d - disputed %d + restored %d = %d, open lots' unrecognised cost %d",
				c.Currency, c.Purchased, c.Recognised, c.Breakage, c.Refunded, c.Disputed, c.Restored, c.Closing, c.Deferred)})
		}
	}
	return out, nil
}

// Review is a parked event that verify does not report because someone reviewed it.
type Review struct {
	EventID, Type, ParkedReason string
	ReceivedAt, ReviewedAt      time.Time
	// ReviewedBy names who: an API key's name, or the operator at the command line; "" for a review
	// recorded before reviewers were named.
	ReviewedBy string
}

func (r Review) String() string {
	by := r.ReviewedBy
	if by == "" {
		by = "(unnamed)"
	}
	return fmt.Sprintf("event %s (%s) parked as %s since %s, reviewed by %s at %s", r.EventID, r.Type,
		r.ParkedReason, r.ReceivedAt.UTC().Format(time.RFC3339), by, r.ReviewedAt.UTC().Format(time.RFC3339))
}

// Reviewed returns the parked events received more than parkedAfter before now that Verify leaves out
// because they were reviewed, each with its reviewer: what silences a report is on record.
func Reviewed(ctx context.Context, q Conn, now time.Time, parkedAfter time.Duration) ([]Review, error) {
	rows, err := dbsqlc.New(q).StripeEventsParkedReviewed(ctx, now.Add(-parkedAfter))
	if err != nil {
		return nil, fmt.Errorf("list reviewed parked events: %w", MapError(err))
	}
	out := make([]Review, len(rows))
	for i, r := range rows {
		out[i] = Review{EventID: r.EventID, Type: r.Type, ParkedReason: r.ParkedReason, ReceivedAt: r.ReceivedAt,
			ReviewedAt: r.ReviewedAt, ReviewedBy: r.ReviewedBy}
	}
	return out, nil
}

// lotViolations checks SPEC §12: every lot's remaining is its amount less its draws plus its refills
// (and a closed lot holds nothing); every account's balance (its last entry's balance_after: the cached
// balance is checked above) is its open lots' remaining less its debt; no open lot is past its expiry
// by more than grace.
func lotViolations(ctx context.Context, queries *dbsqlc.Queries, grace time.Duration) ([]Violation, error) {
	var out []Violation
	lots, err := queries.CreditLotsRemainingMismatches(ctx)
	if err != nil {
		return nil, fmt.Errorf("check lots: %w", MapError(err))
	}
	for _, l := range lots {
		out = append(out, Violation{"lot", fmt.Sprintf("account %s: lot %d (amount %d, closed %t) has remaining %d, its draws %d and refills %d",
			l.AccountID, l.ID, l.Amount, l.Closed, l.Remaining, l.Drawn, l.Refilled)})
	}
	accounts, err := queries.CreditLotsBalanceMismatches(ctx)
	if err != nil {
		return nil, fmt.Errorf("check lot balances: %w", MapError(err))
	}
	for _, a := range accounts {
		out = append(out, Violation{"lots", fmt.Sprintf("account %s: balance %d, open lots hold %d, debt %d",
			a.ID, a.Balance, a.OpenRemaining, a.Debt)})
	}
	overdue, err := queries.CreditLotsOverdue(ctx, grace.Seconds())
	if err != nil {
		return nil, fmt.Errorf("check lot expiry: %w", MapError(err))
	}
	for _, l := range overdue {
		out = append(out, Violation{"lot_expiry", fmt.Sprintf("account %s: lot %d still holds %d, expired at %s",
			l.AccountID, l.ID, l.Remaining, l.ExpiresAt.UTC().Format(time.RFC3339))})
	}
	return out, nil
}
