package db

import (
	"context"
	"fmt"
	"time"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// BalanceAt returns the account's balance at a moment: the balance_after of its last entry created at
// or before at, 0 before its first. It does not say whether the account exists (GetAccount does).
func BalanceAt(ctx context.Context, q Conn, accountID string, at time.Time) (int64, error) {
	balance, err := dbsqlc.New(q).LedgerBalanceAt(ctx, dbsqlc.LedgerBalanceAtParams{AccountID: accountID, At: at})
	if err != nil {
		return 0, fmt.Errorf("balance of %s at %s: %w", accountID, at.Format(time.RFC3339Nano), MapError(err))
	}
	return balance, nil
}

// StatementRange is the part of an account's chain a statement covers: the entries with seq in
// (OpeningSeq, ClosingSeq]. By the chain rule, OpeningBalance + the sum of their amounts = ClosingBalance.
type StatementRange struct {
	AccountID      string
	OpeningSeq     int64
	OpeningBalance int64
	ClosingSeq     int64
	ClosingBalance int64
}

// StatementBounds returns the range of a statement from (inclusive) to (exclusive): it opens after the
// last entry created before from and closes with the last entry created before to. Entries are never
// changed and later ones have higher seqs, so the range reads the same however long its entries take
// to stream.
func StatementBounds(ctx context.Context, q Conn, accountID string, from, to time.Time) (StatementRange, error) {
	queries := dbsqlc.New(q)
	opening, err := queries.LedgerLastBefore(ctx, dbsqlc.LedgerLastBeforeParams{AccountID: accountID, BeforeTime: from})
	if err != nil {
		return StatementRange{}, fmt.Errorf("opening of %s's statement: %w", accountID, MapError(err))
	}
	closing, err := queries.LedgerLastBefore(ctx, dbsqlc.LedgerLastBeforeParams{AccountID: accountID, BeforeTime: to})
	if err != nil {
		return StatementRange{}, fmt.Errorf("closing of %s's statement: %w", accountID, MapError(err))
	}
	out := StatementRange{
		AccountID: accountID, OpeningSeq: opening.Seq, OpeningBalance: opening.BalanceAfter,
		ClosingSeq: closing.Seq, ClosingBalance: closing.BalanceAfter,
	}
	if out.ClosingSeq < out.OpeningSeq {
		// to before from: an empty statement at the opening.
		out.ClosingSeq, out.ClosingBalance = out.OpeningSeq, out.OpeningBalance
	}
	return out, nil
}

// statementPage is how many entries one read of a statement holds: its memory, whatever its length.
const statementPage = 2000

// StatementEntries calls each with the entries of r in seq order, reading them a page at a time, so
// that a statement of any length is streamed in constant memory. An error from each stops the reading
// and is returned.
func StatementEntries(ctx context.Context, q Conn, r StatementRange, each func(Entry) error) error {
	queries := dbsqlc.New(q)
	for after := r.OpeningSeq; after < r.ClosingSeq; {
		rows, err := queries.LedgerStatementPage(ctx, dbsqlc.LedgerStatementPageParams{
			AccountID: r.AccountID, AfterSeq: after, UptoSeq: r.ClosingSeq, MaxRows: statementPage,
		})
		if err != nil {
			return fmt.Errorf("read %s's statement after seq %d: %w", r.AccountID, after, MapError(err))
		}
		if len(rows) == 0 {
			return fmt.Errorf("%s's statement ends at seq %d, but no entry follows seq %d", r.AccountID, r.ClosingSeq, after)
		}
		for _, row := range rows {
			if err := each(entryFromRow(dbsqlc.LedgerGetByDedupeKeyRow(row))); err != nil {
				return err
			}
		}
		after = rows[len(rows)-1].Seq
	}
	return nil
}
