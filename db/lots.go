package db

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// Credit lots (SPEC §12) are made, drawn, refilled and closed by the database itself: the trigger
// ledger_lots applies every ledger insert to the lots of its accounts, under the account locks every
// posting path takes (migration 000009). Go reads lots, asks for a credit's lot terms, and posts the
// entries that end lots (expiry and void).

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

// LotTerms is the lot a credit asks for: positive adjustments choose theirs.
type LotTerms struct {
	Category  string // LotPaid or LotPromotional
	Priority  int    // 0-100
	ExpiresAt *time.Time
}

// WithLotTTLs sets the lifetimes of the lots the ledger makes for top-ups (paidCredit) and for signup
// grants (grant) on every connection of the pool (zero: never expire). The trigger ledger_lots reads
// them when it makes a lot, so every path that credits a top-up or a grant gets them.
func WithLotTTLs(paidCredit, grant time.Duration) Option {
	return func(cfg *poolConfig) {
		params := cfg.ConnConfig.RuntimeParams
		if paidCredit > 0 {
			params[paidCreditTTLSetting] = seconds(paidCredit)
		}
		if grant > 0 {
			params[grantTTLSetting] = seconds(grant)
		}
	}
}

// The session settings lots_ttl reads.
const (
	paidCreditTTLSetting = "onceledger.paid_credit_ttl"
	grantTTLSetting      = "onceledger.grant_ttl"
)

// propagateLotTTLs carries the connection's lot lifetimes to the nodes a transaction touches on Citus,
// where ledger_lots runs on the workers' shards, in sessions Citus opens that do not have the
// coordinator connection's settings: SET LOCAL, which Citus passes on to every node of the transaction
// (citus.propagate_set_commands = local). InTx calls it as a transaction begins; it does nothing on
// plain PostgreSQL or without lifetimes. The statement is worked out once per connection.
func propagateLotTTLs(ctx context.Context, tx Tx) error {
	data := tx.Conn().PgConn().CustomData()
	sql, ok := data[lotTTLsKey].(string)
	if !ok {
		var err error
		if sql, err = lotTTLsStatement(ctx, tx); err != nil {
			return err
		}
		data[lotTTLsKey] = sql
	}
	if sql == "" {
		return nil
	}
	if _, err := tx.Conn().PgConn().Exec(ctx, sql).ReadAll(); err != nil {
		return fmt.Errorf("set lot lifetimes: %w", MapError(err))
	}
	return nil
}

// lotTTLsKey holds, per connection, what propagateLotTTLs runs ("" for nothing).
const lotTTLsKey = "onceledger.lot_ttls"

func lotTTLsStatement(ctx context.Context, tx Tx) (string, error) {
	params := tx.Conn().Config().RuntimeParams
	var sets []string
	for _, name := range []string{paidCreditTTLSetting, grantTTLSetting} {
		if v, ok := params[name]; ok {
			sets = append(sets, "SET LOCAL "+name+" = '"+strings.ReplaceAll(v, "'", "''")+"'")
		}
	}
	if len(sets) == 0 {
		return "", nil
	}
	citus, err := onCitus(ctx, tx)
	if err != nil || !citus {
		return "", err
	}
	return "SET LOCAL citus.propagate_set_commands = 'local'; " + strings.Join(sets, "; "), nil
}

func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " seconds"
}

// SetLotTerms stores the lot the credit posted under dedupeKey asks for, before it is posted (in the
// same transaction or before it). The first terms stored under a key stand; nothing is stored when
// the account does not exist.
func SetLotTerms(ctx context.Context, q Conn, accountID, dedupeKey string, t LotTerms) error {
	err := dbsqlc.New(q).LotTermsInsert(ctx, dbsqlc.LotTermsInsertParams{
		AccountID: accountID, DedupeKey: dedupeKey, Category: t.Category, Priority: int16(t.Priority), ExpiresAt: t.ExpiresAt,
	})
	if err != nil {
		return fmt.Errorf("store lot terms for %q: %w", dedupeKey, MapError(err))
	}
	return nil
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
	rows, err := dbsqlc.New(q).LotDrawsByEntries(ctx, dbsqlc.LotDrawsByEntriesParams{AccountID: accountID, EntryIds: entryIDs})
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
func (l Ledger) VoidLot(ctx context.Context, b Beginner, lotID int64) (LotVoided, error) {
	var out LotVoided
	err := InTx(ctx, b, func(tx Tx) error {
		out = LotVoided{}
		lot, err := GetLot(ctx, tx, lotID)
		if err != nil {
			return err
		}
		q := dbsqlc.New(tx)
		if _, err := q.AccountsLockForGroup(ctx, lot.AccountID); err != nil {
			return fmt.Errorf("lock account %s: %w", lot.AccountID, MapError(err))
		}
		// Read again under the lock: what is left now.
		if lot, err = GetLot(ctx, tx, lotID); err != nil {
			return err
		}
		switch {
		case lot.ClosedAt != nil:
		case lot.Remaining == 0:
			if err := closeEmptyLot(ctx, tx, lot); err != nil {
				return fmt.Errorf("close lot %d: %w", lot.ID, MapError(err))
			}
		default:
			posted, err := l.Post(ctx, tx, Posting{
				AccountID: lot.AccountID, Kind: KindVoid, Amount: -lot.Remaining,
				Description: "lot " + strconv.FormatInt(lot.ID, 10) + " voided", DedupeKey: VoidKey(lot.ID),
			})
			if err != nil {
				return err
			}
			out.Posted, out.Entry = posted.Posted, posted.Entry
		}
		out.Lot, err = GetLot(ctx, tx, lotID)
		return err
	})
	return out, err
}

// ExpireLots runs one step of the expiry pass in one transaction: the accounts (at most maxAccounts)
// holding open lots past their expiry on the database clock are locked in id order, then one
// statement posts an expiry entry keyed expire:{lot_id} for what is left of each such lot, which
// ledger_lots closes; expired lots with nothing left are closed. The remaining is read under the
// account locks, so billing and expiry queue: no credit is both spent and expired. Returns the entries
// posted and whether accounts may be left (maxAccounts were taken).
func (l Ledger) ExpireLots(ctx context.Context, b Beginner, maxAccounts int) (posted []Posted, more bool, err error) {
	err = InTx(ctx, b, func(tx Tx) error {
		posted, more = nil, false
		q := dbsqlc.New(tx)
		due, err := q.CreditLotsExpiringAccounts(ctx, int32(maxAccounts))
		if err != nil || len(due) == 0 {
			return MapError(err)
		}
		more = len(due) == maxAccounts
		locked, err := lockForBilling(ctx, tx, due)
		if err != nil {
			return MapError(err)
		}
		rows, err := expireLocked(ctx, tx, locked)
		if err != nil {
			return err
		}
		posted = make([]Posted, len(rows))
		for i, r := range rows {
			posted[i] = Posted{
				Entry: Entry{
					ID: r.ID, AccountID: r.AccountID, Kind: KindExpiry, Amount: r.Amount, Description: r.Description,
					DedupeKey: r.DedupeKey, CreatedAt: r.CreatedAt, Seq: r.Seq, BalanceAfter: r.BalanceAfter,
				},
				Posted: true, Balance: r.BalanceAfter,
			}
		}
		return l.Posted(ctx, tx, posted)
	})
	return posted, more, err
}

// closeEmptyLot is CreditLotsClose, on Citus through its variant.
func closeEmptyLot(ctx context.Context, tx Tx, lot Lot) error {
	citus, err := onCitus(ctx, tx)
	if err != nil {
		return err
	}
	q := dbsqlc.New(tx)
	if citus {
		_, err = q.CitusCreditLotsClose(ctx, dbsqlc.CitusCreditLotsCloseParams{AccountID: lot.AccountID, ID: lot.ID})
	} else {
		_, err = q.CreditLotsClose(ctx, dbsqlc.CreditLotsCloseParams{AccountID: lot.AccountID, ID: lot.ID})
	}
	return err
}

// expireLocked posts the expiries of the locked accounts' lots past their expiry and closes those with
// nothing left: one statement each on plain PostgreSQL, expireLockedCitus on Citus.
func expireLocked(ctx context.Context, tx Tx, locked []string) ([]dbsqlc.CreditLotsExpireRow, error) {
	citus, err := onCitus(ctx, tx)
	if err != nil {
		return nil, err
	}
	if citus {
		return expireLockedCitus(ctx, tx, locked)
	}
	q := dbsqlc.New(tx)
	rows, err := q.CreditLotsExpire(ctx, locked)
	if err != nil {
		return nil, fmt.Errorf("post expiries: %w", MapError(err))
	}
	if _, err := q.CreditLotsCloseExpiredEmpty(ctx, locked); err != nil {
		return nil, fmt.Errorf("close expired lots: %w", MapError(err))
	}
	return rows, nil
}
