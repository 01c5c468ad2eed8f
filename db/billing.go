package db

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// Usage billing bills decisions as usage entries keyed decision:{id}, a chunk of decisions (by seq)
// per transaction. ledger_dedupe_idx, not a flag on decisions, bills each decision at most once:
// re-reading any window of decisions posts nothing.

// LastDecisionSeq returns the highest decision seq now visible (0: none). A billing pass stops there,
// so that a steady stream of new decisions cannot keep it running forever.
func LastDecisionSeq(ctx context.Context, q Conn) (int64, error) {
	seq, err := dbsqlc.New(q).DecisionsLastSeq(ctx)
	if err != nil {
		return 0, fmt.Errorf("read last decision seq: %w", MapError(err))
	}
	return seq, nil
}

// BilledChunk is what BillChunk did.
type BilledChunk struct {
	// UptoSeq ends the chunk (inclusive); it is the afterSeq asked for when no decision was left.
	UptoSeq int64
	// Read counts the decisions of the chunk, billed before or not.
	Read int64
	// Posted are the usage entries inserted, each with its own balance after.
	Posted []Entry
	// Waiting are the accounts with decisions left unbilled because the account does not exist yet.
	Waiting []WaitingAccount
	// Unbillable are the accounts left out because billing them would take a sum or their balance
	// beyond a bigint; the others were billed.
	Unbillable []Unbillable
	// HoldsCaptured are the holds captured by the decisions billed, in the same transaction.
	HoldsCaptured []DecisionHold
	// OverLimit is what the decisions billed took past hard spend limits' caps (billed in full all the
	// same), counted in their windows' over.
	OverLimit int64
}

// WaitingAccount counts the unbilled decisions of one chunk whose account does not exist yet.
type WaitingAccount struct {
	AccountID string
	Decisions int64
	FirstSeq  int64 // the lowest seq among them
}

// BillChunk bills, in one transaction, the chunk of at most size decisions after afterSeq (up to
// lastSeq): the accounts with decisions still to bill are locked in id order (AccountsLock), so that
// concurrent billing transactions queue instead of deadlocking; then one statement plans their usage
// entries from the decisions and appends them through the one road, chained per account in decision seq
// order (LedgerAppendForDecisions); OnPosted runs with the new entries in the same transaction. A chunk
// billed before writes nothing.
func (l *Ledger) BillChunk(ctx context.Context, afterSeq, lastSeq int64, size int) (BilledChunk, error) {
	out := BilledChunk{UptoSeq: afterSeq}
	err := InTx(ctx, l.pool, func(tx Tx) error {
		out = BilledChunk{UptoSeq: afterSeq}
		q := dbsqlc.New(tx)
		end, err := q.DecisionsChunkEnd(ctx, dbsqlc.DecisionsChunkEndParams{
			AfterSeq: afterSeq, LastSeq: lastSeq, ChunkSize: int32(size),
		})
		if err != nil || end.Decisions == 0 {
			return MapError(err)
		}
		out.UptoSeq, out.Read = end.UptoSeq, end.Decisions
		unbilled, err := q.DecisionsUnbilledByAccount(ctx, dbsqlc.DecisionsUnbilledByAccountParams{AfterSeq: afterSeq, UptoSeq: out.UptoSeq})
		if err != nil || len(unbilled) == 0 {
			// Everything in the chunk was billed before: a re-read, and nothing to write.
			return MapError(err)
		}
		ids := make([]string, len(unbilled))
		for i, u := range unbilled {
			ids[i] = u.AccountID
		}
		// The accounts' pools are locked with them, roots first, for the cascades (SPEC §18).
		pools, rows, err := lockTree(ctx, q, ids)
		if err != nil {
			return err
		}
		exists := make(map[string]bool, len(rows))
		for _, r := range rows {
			exists[r.ID] = true
		}
		var locked []string
		for _, id := range ids {
			if exists[id] {
				locked = append(locked, id)
			}
		}
		tree := pools.locked(rows)
		for _, u := range unbilled {
			if !exists[u.AccountID] {
				out.Waiting = append(out.Waiting, WaitingAccount{AccountID: u.AccountID, Decisions: u.Decisions, FirstSeq: u.FirstSeq})
			}
		}
		if len(locked) == 0 {
			return nil
		}
		entries, err := billUsage(ctx, tx, afterSeq, out.UptoSeq, locked, tree)
		if errors.Is(err, ErrOutOfRange) {
			// One account's sum would leave a bigint, which fails the whole statement: bill the others.
			if out.Unbillable, err = UnbillableAccounts(ctx, tx, afterSeq, out.UptoSeq); err != nil {
				return err
			}
			if len(out.Unbillable) == 0 {
				return fmt.Errorf("a chunk's sums left a bigint, but no account's do: %w", ErrOutOfRange)
			}
			for _, u := range out.Unbillable {
				locked = slices.DeleteFunc(locked, func(id string) bool { return id == u.AccountID })
			}
			entries, err = billUsage(ctx, tx, afterSeq, out.UptoSeq, locked, tree)
		}
		if err != nil {
			return err
		}
		// A decision's hold is resolved with its bill: a separate statement after the usage insert.
		if out.HoldsCaptured, err = CaptureHoldsForDecisions(ctx, tx, afterSeq, out.UptoSeq, locked); err != nil {
			return err
		}
		// What the decisions spent beyond their holds counts in their spend windows, with the bill.
		if out.OverLimit, err = countDecisions(ctx, q, entries, out.HoldsCaptured); err != nil {
			return err
		}
		out.Posted = entries
		return l.inserted(ctx, tx, out.Posted)
	})
	if err != nil {
		return BilledChunk{UptoSeq: afterSeq}, err
	}
	return out, nil
}

// billUsage runs LedgerAppendForDecisions for the locked accounts in a savepoint, so that the statement
// failing with ErrOutOfRange leaves the chunk's transaction usable. The statement is planned for the
// chunk it is given (plannedForItsValues): its arrays hold a chunk's accounts and their pools.
func billUsage(ctx context.Context, tx Tx, afterSeq, uptoSeq int64, locked []string, tree lockedTree) ([]Entry, error) {
	if len(locked) == 0 {
		return nil, nil
	}
	var entries []Entry
	err := InTx(ctx, tx, func(sp Tx) error {
		rows, err := dbsqlc.New(plannedForItsValues{sp}).LedgerAppendForDecisions(ctx, dbsqlc.LedgerAppendForDecisionsParams{
			AfterSeq: afterSeq, UptoSeq: uptoSeq, AccountIDs: locked,
			TreeIDs: tree.ids, TreeParents: tree.parents, TreeDepths: tree.depths, TreeAvailable: tree.available,
		})
		entries = make([]Entry, len(rows))
		for i, r := range rows {
			entries[i] = Entry{
				ID: r.ID, AccountID: r.AccountID, Kind: KindUsage, Amount: r.Amount, Description: r.Description,
				DedupeKey: r.DedupeKey, CreatedAt: r.CreatedAt, Seq: r.Seq, BalanceAfter: r.BalanceAfter,
				Subject: r.Subject, Feature: r.Feature, OnBehalfOf: r.OnBehalfOf,
			}
		}
		return MapError(err)
	})
	return entries, err
}

// Unbillable is an account whose unbilled decisions cannot be billed: their sum, or the balance less
// it, would leave a bigint.
type Unbillable struct {
	AccountID string
	Decisions int64
	TotalCost string // a decimal: it may exceed an int64
	FirstSeq  int64
}

// UnbillableAccounts returns the accounts whose unbilled decisions with seq in (afterSeq, uptoSeq]
// cannot be billed without leaving a bigint (DecisionsUnbillableAccounts). Billing leaves them out so
// that the other accounts are billed; verify reports them.
func UnbillableAccounts(ctx context.Context, q Conn, afterSeq, uptoSeq int64) ([]Unbillable, error) {
	rows, err := dbsqlc.New(q).DecisionsUnbillableAccounts(ctx, dbsqlc.DecisionsUnbillableAccountsParams{AfterSeq: afterSeq, UptoSeq: uptoSeq})
	if err != nil {
		return nil, fmt.Errorf("find accounts whose decisions cannot be billed: %w", MapError(err))
	}
	out := make([]Unbillable, len(rows))
	for i, r := range rows {
		out[i] = Unbillable{AccountID: r.AccountID, Decisions: r.Decisions, TotalCost: r.TotalCost, FirstSeq: r.FirstSeq}
	}
	return out, nil
}

// plannedForItsValues runs q's queries as unnamed statements (pgx.QueryExecModeExec), which PostgreSQL
// plans for the values each run is given. A statement pgx prepares by name settles after five runs on a
// generic plan, which guesses every array parameter at ten elements: given a chunk's thousand accounts,
// billing's generic plan joined them to the chunk's decisions by a nested loop (ten million comparisons a
// chunk, about half its time), where each run's own plan hashes them. One plan a chunk costs a few
// milliseconds; the statements of the functions it calls keep their cached plans.
type plannedForItsValues struct{ q Conn }

func (p plannedForItsValues) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return p.q.Exec(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
}

func (p plannedForItsValues) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return p.q.Query(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
}

func (p plannedForItsValues) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return p.q.QueryRow(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
}
