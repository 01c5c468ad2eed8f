package db

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// Credit lots (SPEC §12) are made, drawn, refilled and closed by the database itself: the trigger
// ledger_lots applies every ledger insert to the lots of its accounts, under the account locks every
// posting path takes (ledger_append), reading what each entry says (its lot terms, the lot
// it takes, the reversal it undoes). Go reads lots and posts the entries that end them (expiry and void).

// Lot categories.
const (
	LotPaid        = "paid"
	LotPromotional = "promotional"
)

// DefaultLotPriority is the priority of a lot that does not ask for one.
const DefaultLotPriority = 50

// ErrLotNotFound: no lot has this id.
var ErrLotNotFound = errors.New("lot not found")

// Lot is one credit lot.
type Lot struct {
	ID        int64
	AccountID string
	EntryID   int64 // the credit that made it
	Category  string
	Priority  int
	Amount    int64
	Remaining int64
	ExpiresAt *time.Time
	CreatedAt time.Time
	ClosedAt  *time.Time
}

// Draw is what one debit took from one lot.
type Draw struct {
	LotID  int64
	Amount int64
}

// LotTerms is the lot a credit asks for (Posting.Lot): positive adjustments choose theirs.
type LotTerms struct {
	Category  string // LotPaid or LotPromotional
	Priority  int    // 0-100
	ExpiresAt *time.Time
}

// Lots returns an account's lots in draw order: those with credit left, or every lot with all.
func Lots(ctx context.Context, q Conn, accountID string, all bool, limit int32) ([]Lot, error) {
	rows, err := dbsqlc.New(q).CreditLotsListByAccount(ctx, dbsqlc.CreditLotsListByAccountParams{
		AccountID: accountID, Every: all, MaxRows: limit,
	})
	if err != nil {
		return nil, fmt.Errorf("list lots of %s: %w", accountID, MapError(err))
	}
	out := make([]Lot, len(rows))
	for i, r := range rows {
		out[i] = lotFromRow(dbsqlc.CreditLot{
			ID: r.ID, AccountID: r.AccountID, EntryID: r.EntryID, Category: r.Category, Priority: r.Priority,
			Amount: r.Amount, Remaining: r.Remaining, ExpiresAt: r.ExpiresAt, CreatedAt: r.CreatedAt, ClosedAt: r.ClosedAt,
		})
	}
	return out, nil
}

// GetLot returns a lot by its id, or ErrLotNotFound.
func GetLot(ctx context.Context, q Conn, id int64) (Lot, error) {
	r, err := dbsqlc.New(q).CreditLotsGet(ctx, id)
	return lotOrNotFound(r, err, id)
}

// lotOfAccount returns a lot of a known account, or ErrLotNotFound.
func lotOfAccount(ctx context.Context, q Conn, accountID string, id int64) (Lot, error) {
	r, err := dbsqlc.New(q).CreditLotsGetOfAccount(ctx, dbsqlc.CreditLotsGetOfAccountParams{AccountID: accountID, ID: id})
	return lotOrNotFound(dbsqlc.CreditLotsGetRow(r), err, id)
}

func lotOrNotFound(r dbsqlc.CreditLotsGetRow, err error, id int64) (Lot, error) {
	if isNoRows(err) {
		return Lot{}, fmt.Errorf("%w: %d", ErrLotNotFound, id)
	}
	if err != nil {
		return Lot{}, fmt.Errorf("read lot %d: %w", id, MapError(err))
	}
	return lotFromRow(dbsqlc.CreditLot{
		ID: r.ID, AccountID: r.AccountID, EntryID: r.EntryID, Category: r.Category, Priority: r.Priority,
		Amount: r.Amount, Remaining: r.Remaining, ExpiresAt: r.ExpiresAt, CreatedAt: r.CreatedAt, ClosedAt: r.ClosedAt,
	}), nil
}

func lotFromRow(r dbsqlc.CreditLot) Lot {
	return Lot{
		ID: r.ID, AccountID: r.AccountID, EntryID: r.EntryID, Category: r.Category, Priority: int(r.Priority),
		Amount: r.Amount, Remaining: r.Remaining, ExpiresAt: r.ExpiresAt, CreatedAt: r.CreatedAt, ClosedAt: r.ClosedAt,
	}
}

// EntryDraws returns, per entry id, the lots each of an account's entries drew from.
func EntryDraws(ctx context.Context, q Conn, accountID string, entryIDs []int64) (map[int64][]Draw, error) {
	rows, err := dbsqlc.New(q).LotDrawsByEntries(ctx, dbsqlc.LotDrawsByEntriesParams{AccountID: accountID, EntryIDs: entryIDs})
	if err != nil {
		return nil, fmt.Errorf("read draws of %s: %w", accountID, MapError(err))
	}
	out := make(map[int64][]Draw)
	for _, r := range rows {
		out[r.EntryID] = append(out[r.EntryID], Draw{LotID: r.LotID, Amount: r.Amount})
	}
	return out, nil
}

// VoidKey and ExpiryKey are the dedupe keys of a lot's void and expiry entries.
func VoidKey(lotID int64) string   { return "void:" + strconv.FormatInt(lotID, 10) }
func ExpiryKey(lotID int64) string { return "expire:" + strconv.FormatInt(lotID, 10) }

// LotVoided is what VoidLot did.
type LotVoided struct {
	Lot    Lot  // the lot after the void
	Posted bool // a void entry took its remaining in this call
	Entry  Entry
}

// VoidLot voids a lot: in one transaction, after locking its account, a void entry keyed void:{lot_id}
// takes what is left of it and ledger_lots closes it (a lot with nothing left is closed without an
// entry). Voiding a closed lot changes nothing (Posted=false). ErrLotNotFound when there is no such lot.
// The request's record (PendingAudit) commits with the void that closed the lot.
func (l *Ledger) VoidLot(ctx context.Context, lotID int64) (LotVoided, error) {
	var out LotVoided
	err := InAuditedTx(ctx, l.pool, func(tx Tx) (bool, error) {
		out = LotVoided{}
		lot, err := GetLot(ctx, tx, lotID)
		if err != nil {
			return false, err
		}
		if _, err := lockAccounts(ctx, dbsqlc.New(tx), []string{lot.AccountID}); err != nil {
			return false, err
		}
		// Read again under the lock: what is left now.
		if lot, err = lotOfAccount(ctx, tx, lot.AccountID, lotID); err != nil {
			return false, err
		}
		closing := lot.ClosedAt == nil
		switch {
		case !closing:
		case lot.Remaining == 0:
			_, err := dbsqlc.New(tx).CreditLotsClose(ctx, dbsqlc.CreditLotsCloseParams{AccountID: lot.AccountID, ID: lot.ID})
			if err != nil {
				return false, fmt.Errorf("close lot %d: %w", lot.ID, MapError(err))
			}
		default:
			posted, err := l.Post(ctx, tx, Posting{
				AccountID: lot.AccountID, Kind: KindVoid, Amount: -lot.Remaining,
				Description: "lot " + strconv.FormatInt(lot.ID, 10) + " voided", DedupeKey: VoidKey(lot.ID), LotID: lot.ID,
			})
			if err != nil {
				return false, err
			}
			out.Posted, out.Entry = posted.New, posted.Entry
		}
		out.Lot, err = lotOfAccount(ctx, tx, lot.AccountID, lotID)
		return closing, err
	})
	return out, err
}

// ExpireLots runs one step of the expiry pass in one transaction: the accounts (at most maxAccounts)
// holding open lots past their expiry on the database clock are locked in id order, then one statement
// posts, through the one road, an expiry entry keyed expire:{lot_id} for what is left of each such lot,
// which ledger_lots closes (LedgerAppendExpiries); expired lots with nothing left are closed. The
// remaining is read under the account locks, so billing and expiry queue: no credit is both spent and
// expired. Returns the entries posted and whether accounts may be left (maxAccounts were taken).
func (l *Ledger) ExpireLots(ctx context.Context, maxAccounts int) (posted []Entry, more bool, err error) {
	err = InTx(ctx, l.pool, func(tx Tx) error {
		posted, more = nil, false
		q := dbsqlc.New(tx)
		due, err := q.CreditLotsExpiringAccounts(ctx, int32(maxAccounts))
		if err != nil || len(due) == 0 {
			return MapError(err)
		}
		more = len(due) == maxAccounts
		rows, err := lockAccounts(ctx, q, due)
		if err != nil {
			return err
		}
		locked := lockedIDs(rows)
		expired, err := q.LedgerAppendExpiries(ctx, locked)
		if err != nil {
			return fmt.Errorf("post expiries: %w", MapError(err))
		}
		if _, err := q.CreditLotsCloseExpiredEmpty(ctx, locked); err != nil {
			return fmt.Errorf("close expired lots: %w", MapError(err))
		}
		posted = make([]Entry, len(expired))
		for i, r := range expired {
			posted[i] = Entry{
				ID: r.ID, AccountID: r.AccountID, Kind: KindExpiry, Amount: r.Amount, Description: r.Description,
				DedupeKey: r.DedupeKey, CreatedAt: r.CreatedAt, Seq: r.Seq, BalanceAfter: r.BalanceAfter,
			}
		}
		return l.inserted(ctx, tx, posted)
	})
	return posted, more, err
}
