package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// Entry kinds, as ledger_kind_sign_check knows them.
const (
	KindTopup         = "topup"
	KindGrant         = "grant"
	KindUsage         = "usage"
	KindRefund        = "refund"
	KindRefundRestore = "refund_restore"
	KindDispute       = "dispute"
	KindDisputeWon    = "dispute_won"
	KindAdjustment    = "adjustment"
	// KindExpiry takes an expired lot's remaining (keyed expire:{lot_id}); KindVoid a voided lot's
	// (void:{lot_id}).
	KindExpiry = "expiry"
	KindVoid   = "void"
)

// MaxAmount bounds every amount taken from outside (10^15 minor units, ten trillion dollars): the API
// refuses larger ones, the webhook parks them (amount_out_of_range). A sum of many can still leave a
// bigint (9.2·10^18): every sum is checked, in SQL and in Go, and fails with ErrOutOfRange.
const MaxAmount = 1_000_000_000_000_000

// Entry is one ledger row.
type Entry struct {
	ID            int64
	AccountID     string
	Kind          string
	Amount        int64
	Description   string
	DedupeKey     string // empty: none
	PaymentIntent string // empty: none
	CreatedAt     time.Time
	// Seq is the entry's position within its account (1, 2, 3, ...); the chain follows it.
	Seq int64
	// BalanceAfter is the account's balance right after this entry.
	BalanceAfter int64
}

// Posting asks for one entry. DedupeKey names the effect: with it, the entry is posted at most once.
type Posting struct {
	AccountID     string
	Kind          string
	Amount        int64
	Description   string
	DedupeKey     string
	PaymentIntent string
	// NoOverdraw refuses the posting (ErrInsufficientBalance) when it would take the balance below
	// zero, as for operator adjustments. Reversals and usage may take a balance negative.
	NoOverdraw bool
}

// Posted is the outcome of Post.
type Posted struct {
	// Entry is the new entry, or on a replay the one posted earlier under the same key.
	Entry Entry
	// Posted is true when this call inserted the entry; false on an exact replay.
	Posted bool
	// Balance is the account's balance right after this call's entry, its BalanceAfter (zero on a
	// replay).
	Balance int64
}

// Ledger posts entries. Its zero value posts with no side effects.
type Ledger struct {
	// OnPosted runs inside the posting transaction with every entry that transaction newly inserted
	// (never on a replay), e.g. to enqueue its notification so that it commits or rolls back with the
	// entry. An error from it rolls the posting back.
	OnPosted func(ctx context.Context, tx Tx, posted []Posted) error
	// Observe, when set, counts every posting attempt by kind and result (ResultPosted, ResultReplay,
	// ResultConflict). A posting counted as posted may still roll back with its transaction.
	Observe func(kind, result string)
}

// Posting results, as Observe reports them.
const (
	ResultPosted   = "posted"
	ResultReplay   = "replay"
	ResultConflict = "conflict"
)

func (l Ledger) observe(kind, result string) {
	if l.Observe != nil {
		l.Observe(kind, result)
	}
}

// observeTaken counts a posting whose key was found taken, from replayOrConflict's answer: a replay, a
// conflict, or (another refusal) nothing.
func (l Ledger) observeTaken(kind string, err error) {
	switch {
	case err == nil:
		l.observe(kind, ResultReplay)
	case errors.Is(err, ErrDedupeConflict):
		l.observe(kind, ResultConflict)
	}
}

// Post appends an entry in tx, after locking its account row: the entry is numbered and carries its
// balance_after from that row, and the trigger ledger_chain moves the cached balance in the same
// statement, so the two never diverge. It must run inside a transaction (InTx).
//
// The dedupe key is enforced by ledger_dedupe_idx, not by a read first: the insert does nothing when
// the key exists, and then
//   - the same account, kind and amount is an exact replay: Posted=false with a nil error;
//   - anything else is ErrDedupeConflict, and nothing was written.
//
// A stored key is answered so whatever the balance is now: a retried debit is a replay. Other errors:
// ErrAccountNotFound, ErrInsufficientBalance (NoOverdraw, refused by the insert's condition on the
// locked row), ErrInvalidAmount, ErrOutOfRange. After an error the caller must roll back.
func (l Ledger) Post(ctx context.Context, tx Tx, p Posting) (Posted, error) {
	if citus, err := onCitus(ctx, tx); err != nil || citus {
		if err != nil {
			return Posted{}, err
		}
		return l.postCitus(ctx, tx, p)
	}
	q := dbsqlc.New(tx)
	inserted, err := q.LedgerInsert(ctx, dbsqlc.LedgerInsertParams{
		AccountID:     p.AccountID,
		Kind:          p.Kind,
		Amount:        p.Amount,
		Description:   p.Description,
		DedupeKey:     nullable(p.DedupeKey),
		PaymentIntent: nullable(p.PaymentIntent),
		NoOverdraw:    p.NoOverdraw,
	})
	if isNoRows(err) {
		out, err := notInserted(ctx, tx, p)
		l.observeTaken(p.Kind, err)
		return out, err
	}
	if err != nil {
		return Posted{}, fmt.Errorf("insert %s entry for %s: %w", p.Kind, p.AccountID, MapError(err))
	}

	entry := Entry{
		ID: inserted.ID, AccountID: p.AccountID, Kind: p.Kind, Amount: p.Amount, Description: p.Description,
		DedupeKey: p.DedupeKey, PaymentIntent: p.PaymentIntent, CreatedAt: inserted.CreatedAt,
		Seq: inserted.Seq, BalanceAfter: inserted.BalanceAfter,
	}
	out := Posted{Entry: entry, Posted: true, Balance: inserted.BalanceAfter}
	if err := l.Posted(ctx, tx, []Posted{out}); err != nil {
		return Posted{}, err
	}
	return out, nil
}

// Posted runs OnPosted, if set, for entries newly inserted in tx, then counts them. Every path that
// inserts entries (Post, bulk billing) calls it, so that no entry escapes its side effects. Entries
// whose OnPosted failed are not counted: their transaction rolls back, and a path that then posts
// them another way (a group's members, one by one) counts them there.
func (l Ledger) Posted(ctx context.Context, tx Tx, posted []Posted) error {
	if l.OnPosted != nil && len(posted) > 0 {
		if err := l.OnPosted(ctx, tx, posted); err != nil {
			return fmt.Errorf("after posting: %w", err)
		}
	}
	for _, p := range posted {
		l.observe(p.Entry.Kind, ResultPosted)
	}
	return nil
}

// notInserted tells why LedgerInsert returned no row: the key is stored (an exact replay, or
// ErrDedupeConflict), or else the account does not exist, or else a no-overdraw posting did not fit.
func notInserted(ctx context.Context, tx Tx, p Posting) (Posted, error) {
	q := dbsqlc.New(tx)
	if p.DedupeKey != "" {
		row, err := q.LedgerGetByDedupeKey(ctx, p.DedupeKey)
		if err == nil {
			return replayOrConflict(entryFromRow(row), p)
		}
		if !isNoRows(err) {
			return Posted{}, fmt.Errorf("read entry for dedupe key %q: %w", p.DedupeKey, MapError(err))
		}
	}
	if _, err := GetAccount(ctx, tx, p.AccountID); err != nil {
		if errors.Is(err, ErrNotFound) {
			return Posted{}, fmt.Errorf("post %s entry: %w: %s", p.Kind, ErrAccountNotFound, p.AccountID)
		}
		return Posted{}, err
	}
	if p.NoOverdraw {
		return Posted{}, fmt.Errorf("post %d to %s: %w", p.Amount, p.AccountID, ErrInsufficientBalance)
	}
	return Posted{}, fmt.Errorf("insert %s entry for %s returned nothing, and no reason was found", p.Kind, p.AccountID)
}

// replayOrConflict compares a posting with the entry that already holds its key: the same account,
// kind and amount is an exact replay (Posted=false, nil); anything else is ErrDedupeConflict.
func replayOrConflict(prior Entry, p Posting) (Posted, error) {
	if prior.AccountID != p.AccountID || prior.Kind != p.Kind || prior.Amount != p.Amount {
		return Posted{Entry: prior}, fmt.Errorf("%w: key %q holds %s %d on %s, asked for %s %d on %s",
			ErrDedupeConflict, p.DedupeKey, prior.Kind, prior.Amount, prior.AccountID, p.Kind, p.Amount, p.AccountID)
	}
	return Posted{Entry: prior}, nil
}

func entryFromRow(r dbsqlc.LedgerEntry) Entry {
	return Entry{
		ID: r.ID, AccountID: r.AccountID, Kind: r.Kind, Amount: r.Amount, Description: r.Description,
		DedupeKey: deref(r.DedupeKey), PaymentIntent: deref(r.PaymentIntent), CreatedAt: r.CreatedAt,
		Seq: r.Seq, BalanceAfter: r.BalanceAfter,
	}
}

// Entries returns an account's entries newest first, at most limit of them, older than beforeID when
// it is non-zero (keyset pagination).
func Entries(ctx context.Context, q Conn, accountID string, beforeID int64, limit int32) ([]Entry, error) {
	var before *int64
	if beforeID > 0 {
		before = &beforeID
	}
	rows, err := dbsqlc.New(q).LedgerListByAccount(ctx, dbsqlc.LedgerListByAccountParams{
		AccountID: accountID, BeforeID: before, MaxRows: limit,
	})
	if err != nil {
		return nil, fmt.Errorf("list entries of %s: %w", accountID, MapError(err))
	}
	entries := make([]Entry, len(rows))
	for i, r := range rows {
		entries[i] = entryFromRow(r)
	}
	return entries, nil
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// deref reads a nullable column: the zero value for NULL.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
