package db

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
	"github.com/onceledger/onceledger/internal/tracing"
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
	// Subject and Feature say who spent and on what: those of the hold or decision the entry was posted
	// for, or of the adjustment that named them (empty: none).
	Subject, Feature string
	// OnBehalfOf is, on a pool's part of a member's debit, the member it paid for (empty: the account
	// paid for itself).
	OnBehalfOf string
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
	// Lot is the lot a credit asks for (a positive adjustment chooses its own); nil takes the defaults
	// (paid for a top-up, promotional otherwise, priority 50, expiring after the lifetime the Ledger was
	// given for top-ups and grants).
	Lot *LotTerms
	// LotID is the lot an expiry or void entry takes.
	LotID int64
	// Reverses is the dedupe key of the reversal a restore (refund_restore, dispute_won) undoes: its lot
	// draws are what the restore refills.
	Reverses string
	// Subject and Feature are stored on the entry (empty: none), in the formats of holds and decisions
	// (ledger_subject_format_check, ledger_feature_format_check).
	Subject, Feature string
	// Cost is what was paid for a credit's lot (nil: nothing, cost 0): a paid top-up's price, an
	// adjustment's named cost. Ignored for debits.
	Cost *Cost
	// OnBehalfOf is, on a pool's part of a member's capture, the member (SPEC §18; empty: none).
	OnBehalfOf string
}

// Cost is an amount of money in a currency's minor units (Currency lower case ISO 4217).
type Cost struct {
	Amount   int64
	Currency string
}

// Posted is the outcome of posting one entry.
type Posted struct {
	// Entry is the new entry, or on a replay the one posted earlier under the same key.
	Entry Entry
	// New is true when this call inserted the entry; false on an exact replay.
	New bool
}

// LedgerConfig is what a Ledger does besides posting: its side effects, its counters, the lifetimes of
// the lots it makes, and how it groups concurrent work.
type LedgerConfig struct {
	// OnPosted runs inside the posting transaction with every entry that transaction newly inserted
	// (never on a replay), e.g. to enqueue its notification so that it commits or rolls back with the
	// entry. An error from it rolls the posting back.
	OnPosted func(ctx context.Context, tx Tx, entries []Entry) error
	// Observe, when set, counts every posting attempt by kind and result (ResultPosted, ResultReplay,
	// ResultConflict). A posting counted as posted may still roll back with its transaction.
	Observe func(kind, result string)
	// PaidCreditTTL and GrantTTL are the lifetimes of the lots of top-ups and of signup grants (zero:
	// they never expire).
	PaidCreditTTL, GrantTTL time.Duration
	// Groups tunes the group commit of postings and hold authorisations.
	Groups GroupOptions
	// GroupCheckouts commits concurrent first deliveries of paid Checkout Sessions together
	// (PayCheckout); off, each takes its own transaction.
	GroupCheckouts bool
	// GeneralPathOnly turns the happy path of a paid Checkout Session off: every delivery takes the
	// general path, which the differential tests compare the happy path with.
	GeneralPathOnly bool
	// Tracing makes a span of each group commit (nil: off).
	Tracing *tracing.Tracing
}

// Ledger is the one road into the money: every entry of the process is posted through it, on either
// backend, and every posting path (a single posting, group commit, billing, hold capture, the webhook's
// Checkout Sessions alone or in groups, lot expiry and voids, restores) hands its planned rows to the
// same statement family (ledger_append, sql/queries/ledger.sql), so that lock order, seq,
// balance_after, no-overdraw and dedupe are written once. Build it once per process, with NewLedger. The
// zero Ledger posts in a caller's transaction (Post) with no side effects; everything else needs
// NewLedger.
type Ledger struct {
	pool *Pool
	cfg  LedgerConfig
	// How a paid Checkout Session's delivery goes, chosen once by NewLedger: the happy path alone, in
	// groups, or not at all (GeneralPathOnly).
	checkoutState func(ctx context.Context, eventID, sessionID, metadataAccountID, paymentIntent string) (CheckoutState, error)
	payCheckout   func(ctx context.Context, p CheckoutPayment) (CheckoutPaid, Posted, error)

	postings  *groupQueue[Posting, Posted, lastBalance]
	holds     *groupQueue[accountHold, HoldAuthorised, struct{}]     // keyed by the tree's root
	roots     sync.Map                                               // account → the root of its tree (rootOf)
	rootsKept atomic.Int64                                           // about how many accounts roots holds
	checkouts *groupQueue[CheckoutPayment, checkoutAnswer, struct{}] // nil: not grouped
	// checkoutLockTimeout bounds each lock wait of a group of Checkout Sessions.
	checkoutLockTimeout time.Duration
}

// NewLedger returns the Ledger posting on pool, configured as cfg says.
func NewLedger(pool *Pool, cfg LedgerConfig) *Ledger {
	l := &Ledger{pool: pool, cfg: cfg, checkoutLockTimeout: checkoutLockTimeout}
	l.postings = newGroupQueue(cfg.Groups.Window, cfg.Groups.MaxGroup, l.commitPostings)
	l.holds = newGroupQueue(cfg.Groups.Window, cfg.Groups.MaxGroup, l.commitHolds)
	switch {
	case cfg.GeneralPathOnly:
		l.checkoutState, l.payCheckout = l.recordedOnly, l.generalPathOnly
	case cfg.GroupCheckouts:
		l.checkouts = newGroupQueue(checkoutWindow, maxCheckoutGroup, l.commitCheckouts)
		l.checkoutState, l.payCheckout = l.readCheckoutState, l.payCheckoutGrouped
	default:
		l.checkoutState, l.payCheckout = l.readCheckoutState, l.payCheckoutOwn
	}
	return l
}

// Pool is the pool the Ledger posts on.
func (l *Ledger) Pool() *Pool { return l.pool }

// Collecting returns a Ledger that posts like l and, before l's own OnPosted, hands every entry it
// inserts to collect, counting nothing: what a dry run of a replay uses to see what it would post. It
// groups nothing.
func (l *Ledger) Collecting(collect func(entries []Entry)) *Ledger {
	cfg := l.cfg
	onPosted := l.cfg.OnPosted
	cfg.Observe = nil
	cfg.GroupCheckouts = false
	cfg.OnPosted = func(ctx context.Context, tx Tx, entries []Entry) error {
		collect(entries)
		if onPosted == nil {
			return nil
		}
		return onPosted(ctx, tx, entries)
	}
	return NewLedger(l.pool, cfg)
}

// Posting results, as Observe reports them.
const (
	ResultPosted   = "posted"
	ResultReplay   = "replay"
	ResultConflict = "conflict"
)

func (l *Ledger) observe(kind, result string) {
	if l.cfg.Observe != nil {
		l.cfg.Observe(kind, result)
	}
}

// observeTaken counts a posting whose key was found taken, from replayOrConflict's answer: a replay, a
// conflict, or (another refusal) nothing.
func (l *Ledger) observeTaken(kind string, err error) {
	switch {
	case err == nil:
		l.observe(kind, ResultReplay)
	case errors.Is(err, ErrDedupeConflict):
		l.observe(kind, ResultConflict)
	}
}

// Post appends an entry in tx, through the one road (ledger_append): its account row is locked, the
// entry is numbered and carries its balance_after from that row, and the trigger ledger_chain moves the
// cached balance in the same statement, so the two never diverge. It must run inside a transaction
// (InTx).
//
// The dedupe key is enforced by the database, not by a read first: the insert leaves out a posting
// whose key exists, and then
//   - the same account, kind and amount is an exact replay: New=false with a nil error;
//   - anything else is ErrDedupeConflict, and nothing was written.
//
// A stored key is answered so whatever the balance is now: a retried debit is a replay. Other errors:
// ErrAccountNotFound, ErrInsufficientBalance (NoOverdraw, refused by the insert's condition on the
// locked row), ErrInvalidAmount, ErrOutOfRange. After an error the caller must roll back.
func (l *Ledger) Post(ctx context.Context, tx Tx, p Posting) (Posted, error) {
	rows, err := dbsqlc.New(tx).LedgerAppend(ctx, l.appendArgs([]Posting{p}, nil))
	if err != nil {
		return Posted{}, fmt.Errorf("insert %s entry for %s: %w", p.Kind, p.AccountID, MapError(err))
	}
	entries, inserted := appended(rows, 1)
	if inserted[0] == nil {
		out, err := notInserted(ctx, tx, p)
		l.observeTaken(p.Kind, err)
		return out, err
	}
	if err := l.inserted(ctx, tx, entries); err != nil {
		return Posted{}, err
	}
	return Posted{Entry: *inserted[0], New: true}, nil
}

// appendArgs are LedgerAppend's arguments for postings planned in Go, in order, with the lot terms the
// Ledger gives credits that do not choose their own. With balance, nothing is inserted unless the
// accounts' balance is still that.
func (l *Ledger) appendArgs(postings []Posting, balance *int64) dbsqlc.LedgerAppendParams {
	arg := dbsqlc.LedgerAppendParams{Balance: balance}
	for _, p := range postings {
		arg.AccountIDs = append(arg.AccountIDs, p.AccountID)
		arg.Kinds = append(arg.Kinds, p.Kind)
		arg.Amounts = append(arg.Amounts, p.Amount)
		arg.Descriptions = append(arg.Descriptions, p.Description)
		arg.DedupeKeys = append(arg.DedupeKeys, p.DedupeKey)
		arg.PaymentIntents = append(arg.PaymentIntents, p.PaymentIntent)
		arg.NoOverdraw = append(arg.NoOverdraw, p.NoOverdraw)
		arg.LotIDs = append(arg.LotIDs, p.LotID)
		arg.Reverses = append(arg.Reverses, p.Reverses)
		arg.Subjects = append(arg.Subjects, p.Subject)
		arg.Features = append(arg.Features, p.Feature)
		arg.OnBehalfOf = append(arg.OnBehalfOf, p.OnBehalfOf)
		var cost Cost
		if p.Cost != nil && p.Amount > 0 {
			cost = *p.Cost
		}
		arg.LotCostAmounts = append(arg.LotCostAmounts, cost.Amount)
		arg.LotCostCurrencies = append(arg.LotCostCurrencies, cost.Currency)
		terms, ttl := l.lotTerms(p)
		expiresAt := ""
		if terms.ExpiresAt != nil {
			expiresAt = terms.ExpiresAt.UTC().Format(time.RFC3339Nano)
		}
		arg.LotCategories = append(arg.LotCategories, terms.Category)
		arg.LotPriorities = append(arg.LotPriorities, int16(terms.Priority))
		arg.LotExpiresAt = append(arg.LotExpiresAt, expiresAt)
		arg.LotTTLs = append(arg.LotTTLs, ttl.Seconds())
	}
	return arg
}

// lotTerms is the lot a credit makes: its own terms, or the defaults, a top-up's and a grant's lot
// expiring after the configured lifetime (ttl, counted from the entry's created_at). Debits make none.
func (l *Ledger) lotTerms(p Posting) (terms LotTerms, ttl time.Duration) {
	if p.Amount <= 0 {
		return LotTerms{}, 0
	}
	if p.Lot != nil {
		return *p.Lot, 0
	}
	terms = LotTerms{Category: LotPromotional, Priority: DefaultLotPriority}
	switch p.Kind {
	case KindTopup:
		terms.Category, ttl = LotPaid, l.cfg.PaidCreditTTL
	case KindGrant:
		ttl = l.cfg.GrantTTL
	}
	return terms, ttl
}

// appended turns what LedgerAppend returned into entries: every entry inserted, in the order returned
// (an expiry ledger_append posted on its own included), and by planned row (of n) the entry inserted
// for it, nil when the row was left out.
func appended(rows []dbsqlc.LedgerAppendRow, n int) (entries []Entry, byRow []*Entry) {
	entries = make([]Entry, len(rows))
	byRow = make([]*Entry, n)
	for i, r := range rows {
		entries[i] = Entry{
			ID: r.ID, AccountID: r.AccountID, Kind: r.Kind, Amount: r.Amount, Description: r.Description,
			DedupeKey: r.DedupeKey, PaymentIntent: r.PaymentIntent, CreatedAt: r.CreatedAt, Seq: r.Seq,
			BalanceAfter: r.BalanceAfter, Subject: r.Subject, Feature: r.Feature, OnBehalfOf: r.OnBehalfOf,
		}
		if r.K > 0 && int(r.K) <= n {
			byRow[r.K-1] = &entries[i]
		}
	}
	return entries, byRow
}

// inserted runs OnPosted, if set, for entries newly inserted in tx, then counts them. Every path that
// inserts entries calls it with every entry its statement inserted, so that no entry escapes its side
// effects. Entries whose OnPosted failed are not counted: their transaction rolls back, and a path that
// then posts them another way (a group's members, one by one) counts them there.
func (l *Ledger) inserted(ctx context.Context, tx Tx, entries []Entry) error {
	if l.cfg.OnPosted != nil && len(entries) > 0 {
		if err := l.cfg.OnPosted(ctx, tx, entries); err != nil {
			return fmt.Errorf("after posting: %w", err)
		}
	}
	for _, e := range entries {
		l.observe(e.Kind, ResultPosted)
	}
	return nil
}

// notInserted tells why a posting was left out: its key is stored (an exact replay, or
// ErrDedupeConflict), or else its account does not exist, or else a no-overdraw posting did not fit.
func notInserted(ctx context.Context, q Conn, p Posting) (Posted, error) {
	if p.DedupeKey != "" {
		prior, err := EntryByDedupeKey(ctx, q, p.DedupeKey)
		if err == nil {
			return replayOrConflict(prior, p)
		}
		if !errors.Is(err, ErrNotFound) {
			return Posted{}, err
		}
	}
	if _, err := GetAccount(ctx, q, p.AccountID); err != nil {
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
// kind and amount is an exact replay (New=false, nil); anything else is ErrDedupeConflict.
// EntryLotCost is what a credit entry said its lot cost (nil: nothing was paid), to tell a replayed
// request from one reusing its key with another cost. ErrNotFound when the entry does not exist.
func EntryLotCost(ctx context.Context, q Conn, e Entry) (*Cost, error) {
	r, err := dbsqlc.New(q).LedgerLotCost(ctx, dbsqlc.LedgerLotCostParams{AccountID: e.AccountID, ID: e.ID})
	if isNoRows(err) {
		return nil, fmt.Errorf("entry %d: %w", e.ID, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read the lot cost of entry %d: %w", e.ID, MapError(err))
	}
	if r.CostCurrency == "" {
		return nil, nil
	}
	return &Cost{Amount: r.CostAmount, Currency: r.CostCurrency}, nil
}

func replayOrConflict(prior Entry, p Posting) (Posted, error) {
	if prior.AccountID != p.AccountID || prior.Kind != p.Kind || prior.Amount != p.Amount {
		return Posted{Entry: prior}, fmt.Errorf("%w: key %q holds %s %d on %s, asked for %s %d on %s",
			ErrDedupeConflict, p.DedupeKey, prior.Kind, prior.Amount, prior.AccountID, p.Kind, p.Amount, p.AccountID)
	}
	return Posted{Entry: prior}, nil
}

// entryRow is an entry's columns as a query selects them: each query has a row type of its own, all
// with this one layout.
type entryRow interface {
	~struct {
		ID            int64
		AccountID     string
		Kind          string
		Amount        int64
		Description   string
		DedupeKey     *string
		PaymentIntent *string
		CreatedAt     time.Time
		Seq           int64
		BalanceAfter  int64
		Subject       *string
		Feature       *string
		OnBehalfOf    *string
	}
}

// entryFromRow reads an entry as the queries that list entries select it (convert other entryRow
// types to this one).
func entryFromRow(r dbsqlc.LedgerGetByDedupeKeyRow) Entry {
	return Entry{
		ID: r.ID, AccountID: r.AccountID, Kind: r.Kind, Amount: r.Amount, Description: r.Description,
		DedupeKey: deref(r.DedupeKey), PaymentIntent: deref(r.PaymentIntent), CreatedAt: r.CreatedAt,
		Seq: r.Seq, BalanceAfter: r.BalanceAfter, Subject: deref(r.Subject), Feature: deref(r.Feature),
		OnBehalfOf: deref(r.OnBehalfOf),
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
		entries[i] = entryFromRow(dbsqlc.LedgerGetByDedupeKeyRow(r))
	}
	return entries, nil
}

// lockAccounts locks the existing accounts among ids in id order (AccountsLock) and returns them.
func lockAccounts(ctx context.Context, q *dbsqlc.Queries, ids []string) ([]dbsqlc.AccountsLockRow, error) {
	rows, err := q.AccountsLock(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("lock %d accounts: %w", len(ids), MapError(err))
	}
	return rows, nil
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

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// lockedIDs are the ids of accounts AccountsLock locked, in its order.
func lockedIDs(rows []dbsqlc.AccountsLockRow) []string {
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return ids
}
