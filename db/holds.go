package db

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// Hold statuses, as holds_status_check knows them.
const (
	HoldHeld     = "held"
	HoldCaptured = "captured"
	HoldVoided   = "voided"
	HoldExpired  = "expired"
)

// Outcomes of resolving a hold that is no longer held, or cannot be resolved as asked.
var (
	// ErrHoldNotFound: the account has no hold with this id.
	ErrHoldNotFound = errors.New("hold not found")
	// ErrHoldCaptured: the hold was captured already: by its decision (for a capture), or at all (for
	// a void). A capture through the API replayed with another amount is ErrDedupeConflict instead.
	ErrHoldCaptured = errors.New("hold already captured")
	// ErrHoldVoided: the hold was voided.
	ErrHoldVoided = errors.New("hold voided")
	// ErrHoldExpired: the hold's time was up on the database clock.
	ErrHoldExpired = errors.New("hold expired")
	// ErrAmountExceedsHold: a capture asked for more than the hold reserves.
	ErrAmountExceedsHold = errors.New("amount exceeds the hold")
)

// Hold is one reservation of an account's credits.
type Hold struct {
	AccountID string
	ID        string
	Amount    int64
	Status    string
	// CapturedAmount is what the capture took; zero unless captured.
	CapturedAmount int64
	// DecisionID names the decision whose billing captured the hold; empty when captured through the
	// API, or not captured.
	DecisionID string
	ExpiresAt  time.Time
	CreatedAt  time.Time
	ResolvedAt *time.Time
	Subject    string // empty: none
	Feature    string // empty: none
	// LimitIDs are the spend limits the hold was counted against, each in the window of WindowStarts.
	LimitIDs     []string
	WindowStarts []time.Time
	// Pooled is what the hold reserved on its account's pools (SPEC §18); the account itself reserved
	// Amount - Pooled.
	Pooled int64
}

// HoldRequest asks for a hold: the caller's id, the amount, how long it lives, and who spends it on
// what (empty: none), which decides the spend limits it counts against.
type HoldRequest struct {
	ID               string
	Amount           int64
	ExpiresIn        time.Duration
	Subject, Feature string
}

// HoldKey is the dedupe key of the usage entry a hold's capture through the API posts: once per hold.
func HoldKey(accountID, holdID string) string { return "hold:" + accountID + ":" + holdID }

func holdFromRow(r dbsqlc.Hold) Hold {
	h := Hold{
		AccountID: r.AccountID, ID: r.ID, Amount: r.Amount, Status: r.Status, DecisionID: deref(r.DecisionID),
		ExpiresAt: r.ExpiresAt, CreatedAt: r.CreatedAt, ResolvedAt: r.ResolvedAt,
		Subject: deref(r.Subject), Feature: deref(r.Feature), LimitIDs: r.LimitIDs, WindowStarts: r.WindowStarts,
		Pooled: r.Pooled,
	}
	if r.CapturedAmount != nil {
		h.CapturedAmount = *r.CapturedAmount
	}
	return h
}

// HoldAuthorised is the outcome of AuthoriseHold.
type HoldAuthorised struct {
	Hold Hold
	// Created is true when this call reserved the hold; false on a replay (the stored hold, whatever
	// its status now).
	Created bool
}

// AuthoriseHold reserves the hold's amount on the account under the caller's hold id, in one
// transaction: the account row is locked (first, as on every path that writes holds, so that a group
// of authorisations and this one never wait for each other in opposite orders), the current windows of
// its spend limits are opened, and HoldsInsertGroup inserts the hold (holds_pkey makes a repeated id a
// replay), reserves it only while balance - held covers it, and counts it in the window of every limit
// that applies, a hard limit's only while spent + held + amount stays within its cap. Those conditions
// on the locked rows are the only checks, never an earlier read. When one refuses, the transaction
// rolls back and nothing is kept: a refused authorisation leaves no hold to capture, and moves no window.
//
// Errors: ErrInsufficientBalance (available balance short), *LimitExceededError (ErrLimitExceeded: a
// hard limit's window would go past its cap), ErrDedupeConflict (the id is held with another amount),
// ErrAccountNotFound.
func AuthoriseHold(ctx context.Context, b Beginner, accountID string, req HoldRequest) (HoldAuthorised, error) {
	return authoriseHold(ctx, b, PendingAuditOf(ctx), accountID, req)
}

// authoriseHold is AuthoriseHold for the request whose pending record is p: the hold it creates and
// that record commit together.
func authoriseHold(ctx context.Context, b Beginner, p *PendingAudit, accountID string, req HoldRequest) (HoldAuthorised, error) {
	var out HoldAuthorised
	err := inAuditedTx(ctx, b, p, func(tx Tx) (bool, error) {
		q := dbsqlc.New(tx)
		pools, locked, err := lockTree(ctx, q, []string{accountID})
		if err != nil {
			return false, err
		} else if _, ok := pools.parents[accountID]; !ok || len(locked) == 0 {
			return false, fmt.Errorf("hold %s of %s: %w", req.ID, accountID, ErrAccountNotFound)
		}
		windows, err := openWindows(ctx, q, accountID)
		if err != nil {
			return false, err
		}
		levels := newReserver(pools, roomOf(locked), accountID)
		parts := []holdParts{levels.reserve(req.Amount)}
		rows, err := q.HoldsInsertGroup(ctx, holdsInsertParams(accountID, []HoldRequest{req}, windows, parts))
		if err != nil {
			return false, fmt.Errorf("insert hold %s of %s: %w", req.ID, accountID, MapError(err))
		}
		if len(rows) == 0 {
			stored, err := GetHold(ctx, tx, accountID, req.ID)
			if err != nil {
				return false, err
			}
			out = HoldAuthorised{Hold: stored}
			if stored.Amount != req.Amount {
				return false, fmt.Errorf("%w: hold %s of %s holds %d, asked for %d", ErrDedupeConflict, req.ID, accountID, stored.Amount, req.Amount)
			}
			return false, nil
		}
		switch r := rows[0]; {
		case !r.Reserved:
			// The account is locked: the condition refused it.
			return false, fmt.Errorf("hold %d on %s: %w", req.Amount, accountID, ErrInsufficientBalance)
		case !r.WithinLimits:
			if err := windows.refusal(req, nil); err != nil {
				return false, err
			}
			return false, fmt.Errorf("spend windows of %s: the limits that apply to hold %s are not the ones opened under the lock", accountID, req.ID)
		default:
			if reserved, err := reservePools(ctx, q, []string{accountID}, []HoldRequest{req}, parts); err != nil {
				return false, err
			} else if !reserved {
				return false, fmt.Errorf("the pools of %s moved under the lock: hold %s no longer fits", accountID, req.ID)
			}
			out = HoldAuthorised{Hold: holdFromInserted(r), Created: true}
			return true, nil
		}
	})
	return out, err
}

// holdsInsertParams are HoldsInsertGroup's arrays for the holds of one account, each hold paired with
// the window of every limit of windows that applies to it (the statement checks that none is missing)
// and with what its account's pools reserve of it (parts, in the order of reqs: reservePools reserves
// that).
func holdsInsertParams(accountID string, reqs []HoldRequest, windows spendWindows, parts []holdParts) dbsqlc.HoldsInsertGroupParams {
	arg := dbsqlc.HoldsInsertGroupParams{AccountID: accountID}
	for i, r := range reqs {
		arg.Pooled = append(arg.Pooled, parts[i].pooled)
		arg.IDs = append(arg.IDs, r.ID)
		arg.Amounts = append(arg.Amounts, r.Amount)
		arg.ExpiresInSeconds = append(arg.ExpiresInSeconds, r.ExpiresIn.Seconds())
		arg.Subjects = append(arg.Subjects, r.Subject)
		arg.Features = append(arg.Features, r.Feature)
		for _, w := range windows {
			if w.applies(r.Subject, r.Feature) {
				arg.PairHoldIDs = append(arg.PairHoldIDs, r.ID)
				arg.PairLimitIDs = append(arg.PairLimitIDs, w.ID)
				arg.PairWindowStarts = append(arg.PairWindowStarts, w.WindowStart)
			}
		}
	}
	return arg
}

// reservePools reserves on their accounts' pools what the holds just inserted (reqs, of accounts) draw on
// them (parts, in the order of reqs), in one statement, and reports whether every pool had it. Nothing to
// do, and no statement, when no hold draws on a pool.
func reservePools(ctx context.Context, q *dbsqlc.Queries, accounts []string, reqs []HoldRequest, parts []holdParts) (bool, error) {
	var arg dbsqlc.HoldsReservePoolsParams
	for i, r := range reqs {
		for k, pool := range parts[i].pools {
			arg.AccountIDs = append(arg.AccountIDs, accounts[i])
			arg.HoldIDs = append(arg.HoldIDs, r.ID)
			arg.PoolIDs = append(arg.PoolIDs, pool)
			arg.Amounts = append(arg.Amounts, parts[i].amounts[k])
		}
	}
	if len(arg.HoldIDs) == 0 {
		return true, nil
	}
	reserved, err := q.HoldsReservePools(ctx, arg)
	if err != nil {
		return false, fmt.Errorf("reserve %d holds of %v on their pools: %w", len(reqs), accounts, MapError(err))
	}
	return reserved, nil
}

func holdFromInserted(r dbsqlc.HoldsInsertGroupRow) Hold {
	return holdFromRow(dbsqlc.Hold{
		AccountID: r.AccountID, ID: r.ID, Amount: r.Amount, Status: r.Status, CapturedAmount: r.CapturedAmount,
		DecisionID: r.DecisionID, ExpiresAt: r.ExpiresAt, CreatedAt: r.CreatedAt, ResolvedAt: r.ResolvedAt,
		Subject: r.Subject, Feature: r.Feature, LimitIDs: r.LimitIDs, WindowStarts: r.WindowStarts, Pooled: r.Pooled,
	})
}

// GetHold returns the hold, or ErrHoldNotFound.
func GetHold(ctx context.Context, q Conn, accountID, holdID string) (Hold, error) {
	return getHold(ctx, dbsqlc.New(q), accountID, holdID)
}

// OpenHolds returns the account's holds still held, soonest to expire first, at most limit.
func OpenHolds(ctx context.Context, q Conn, accountID string, limit int32) ([]Hold, error) {
	rows, err := dbsqlc.New(q).HoldsOpenByAccount(ctx, dbsqlc.HoldsOpenByAccountParams{AccountID: accountID, MaxRows: limit})
	if err != nil {
		return nil, fmt.Errorf("list open holds of %s: %w", accountID, MapError(err))
	}
	return holdsFromRows(rows), nil
}

// HoldsExpiringWithin returns the holds of every account still held that expire within d on the
// database clock, or are past their time with the expiry pass not there yet, soonest first, at most
// limit.
func HoldsExpiringWithin(ctx context.Context, q Conn, d time.Duration, limit int32) ([]Hold, error) {
	rows, err := dbsqlc.New(q).HoldsExpiringSoon(ctx, dbsqlc.HoldsExpiringSoonParams{WithinSeconds: d.Seconds(), MaxRows: limit})
	if err != nil {
		return nil, fmt.Errorf("list holds expiring within %s: %w", d, MapError(err))
	}
	return holdsFromRows(rows), nil
}

func holdsFromRows(rows []dbsqlc.Hold) []Hold {
	out := make([]Hold, len(rows))
	for i, r := range rows {
		out[i] = holdFromRow(r)
	}
	return out
}

func getHold(ctx context.Context, q *dbsqlc.Queries, accountID, holdID string) (Hold, error) {
	r, err := q.HoldsGet(ctx, dbsqlc.HoldsGetParams{AccountID: accountID, ID: holdID})
	if isNoRows(err) {
		return Hold{}, fmt.Errorf("hold %s of %s: %w", holdID, accountID, ErrHoldNotFound)
	}
	if err != nil {
		return Hold{}, fmt.Errorf("get hold %s of %s: %w", holdID, accountID, MapError(err))
	}
	return holdFromRow(r), nil
}

// HoldCapturedResult is the outcome of CaptureHold.
type HoldCapturedResult struct {
	Hold Hold
	// Entry is the usage entry of the capture on the hold's account: new, or on a replay the one posted
	// by the first capture. Parts are, on a member whose pools reserved part of the hold, the entries
	// each pool posted for it (SPEC §18), nearest pool first: new, or on a replay the first capture's.
	Entry Entry
	Parts []Entry
	// Posted is true when this call captured the hold; false on an exact replay.
	Posted bool
}

// CaptureHold captures the hold for amount (all of it when amount is 0) in one transaction: the
// account row is locked (with its pools, roots first), the hold moves from held to captured by
// HoldsCapture's conditional UPDATE (still held, unexpired on the database clock, amount within the
// hold), its reservations are released and the usage is posted through l (postCapture: no overdraw
// check, the credits were reserved), carrying the hold's subject and feature. Only the transaction whose
// UPDATE moved the hold does any of that.
//
// Otherwise: a replay of a capture through the API with the same amount is Posted=false with the
// original entry; with another amount ErrDedupeConflict. ErrAmountExceedsHold, ErrHoldCaptured (by its
// decision), ErrHoldVoided, ErrHoldExpired, ErrHoldNotFound. A hold still held but past its expiry is
// expired by this call (committed) and answered ErrHoldExpired, so that the answer and the stored
// status agree whether or not the expiry pass has run.
func (l *Ledger) CaptureHold(ctx context.Context, accountID, holdID string, amount int64) (HoldCapturedResult, error) {
	var (
		out     HoldCapturedResult
		refusal error // an answer that commits what the transaction did (an expiry)
	)
	// The request's record commits with a capture; an expiry this call commits is its refusal's.
	err := InAuditedTx(ctx, l.pool, func(tx Tx) (bool, error) {
		q := dbsqlc.New(tx)
		if err := lockHoldAccount(ctx, q, accountID, holdID); err != nil {
			return false, err
		}
		var asked *int64
		if amount > 0 {
			asked = &amount
		}
		row, err := q.HoldsCapture(ctx, dbsqlc.HoldsCaptureParams{AccountID: accountID, ID: holdID, Amount: asked})
		if isNoRows(err) {
			out, refusal, err = l.notCaptured(ctx, q, accountID, holdID, amount)
			return false, err
		}
		if err != nil {
			return false, fmt.Errorf("capture hold %s of %s: %w", holdID, accountID, MapError(err))
		}
		hold := holdFromRow(row)
		reserved, err := releaseHeld(ctx, q, hold)
		if err != nil {
			return false, err
		}
		entries, err := l.postCapture(ctx, tx, hold, reserved)
		if err != nil {
			return false, err
		}
		out = HoldCapturedResult{Hold: hold, Entry: entries[0], Parts: entries[1:], Posted: true}
		return true, nil
	})
	if err != nil {
		return HoldCapturedResult{}, err
	}
	return out, refusal
}

// captureParts returns the entries the pools of a hold's account posted for its capture through the API
// (HoldKey@pool), nearest pool first; none for a hold whose account reserved all of it.
func captureParts(ctx context.Context, q *dbsqlc.Queries, h Hold) ([]Entry, error) {
	if h.Pooled == 0 {
		return nil, nil
	}
	pools, err := readPools(ctx, q, []string{h.AccountID})
	if err != nil {
		return nil, err
	}
	var keys []string
	for id := pools.parents[h.AccountID]; id != ""; id = pools.parents[id] {
		keys = append(keys, HoldKey(h.AccountID, h.ID)+"@"+id)
	}
	stored, err := storedEntries(ctx, q, keys)
	if err != nil {
		return nil, err
	}
	var parts []Entry
	for _, k := range keys {
		if e, ok := stored[k]; ok {
			parts = append(parts, e)
		}
	}
	return parts, nil
}

// notCaptured answers a capture whose UPDATE moved nothing, from the hold as it is now (the account
// row is locked, so no other resolution can move it meanwhile). A replay returns the original capture
// with a nil refusal; a hold past its expiry is expired here.
func (l *Ledger) notCaptured(ctx context.Context, q *dbsqlc.Queries, accountID, holdID string, amount int64) (out HoldCapturedResult, refusal, err error) {
	hold, err := getHold(ctx, q, accountID, holdID)
	if err != nil {
		return HoldCapturedResult{}, nil, err
	}
	if amount > hold.Amount {
		return HoldCapturedResult{}, nil, fmt.Errorf("%w: asked %d of hold %s, which holds %d", ErrAmountExceedsHold, amount, holdID, hold.Amount)
	}
	if amount == 0 {
		amount = hold.Amount
	}
	switch hold.Status {
	case HoldCaptured:
		if hold.DecisionID != "" {
			return HoldCapturedResult{}, nil, fmt.Errorf("%w: hold %s of %s by decision %s", ErrHoldCaptured, holdID, accountID, hold.DecisionID)
		}
		row, err := q.LedgerGetByDedupeKey(ctx, HoldKey(accountID, holdID))
		if err != nil {
			return HoldCapturedResult{}, nil, fmt.Errorf("read capture of hold %s of %s: %w", holdID, accountID, MapError(err))
		}
		if hold.CapturedAmount != amount {
			return HoldCapturedResult{}, nil, fmt.Errorf("%w: hold %s of %s was captured for %d, asked %d", ErrDedupeConflict, holdID, accountID, hold.CapturedAmount, amount)
		}
		parts, err := captureParts(ctx, q, hold)
		if err != nil {
			return HoldCapturedResult{}, nil, err
		}
		l.observe(KindUsage, ResultReplay)
		return HoldCapturedResult{Hold: hold, Entry: entryFromRow(row), Parts: parts}, nil, nil
	case HoldHeld:
		// Held, within its amount, yet not captured: its time is up.
		expired, err := expireOne(ctx, q, accountID, holdID)
		return HoldCapturedResult{Hold: expired}, resolvedErr(expired), err
	default:
		return HoldCapturedResult{Hold: hold}, resolvedErr(hold), nil
	}
}

// VoidHold releases the hold's reservation in one transaction: the account row is locked and the hold
// moves from held to voided by HoldsVoid's conditional UPDATE, and only then is the reservation
// released. A void of a voided hold answers the same and moves nothing; ErrHoldCaptured,
// ErrHoldExpired, ErrHoldNotFound otherwise. A hold still held but past its expiry is expired by this
// call (committed) and answered ErrHoldExpired.
func VoidHold(ctx context.Context, b Beginner, accountID, holdID string) (Hold, error) {
	var (
		out     Hold
		refusal error
	)
	// The request's record commits with a void; an expiry this call commits is its refusal's.
	err := InAuditedTx(ctx, b, func(tx Tx) (bool, error) {
		q := dbsqlc.New(tx)
		if err := lockHoldAccount(ctx, q, accountID, holdID); err != nil {
			return false, err
		}
		hold, err := resolveHeld(ctx, q, accountID, holdID)
		if errors.Is(err, errNotHeld) {
			stored, err := getHold(ctx, q, accountID, holdID)
			out = stored
			if err == nil && out.Status != HoldVoided {
				refusal = resolvedErr(out)
			}
			return false, err
		}
		out = hold
		if err == nil && hold.Status == HoldExpired {
			refusal = resolvedErr(hold)
		}
		return refusal == nil, err
	})
	if err != nil {
		return Hold{}, err
	}
	return out, refusal
}

// errNotHeld: HoldsVoid found the hold no longer held (or not there).
var errNotHeld = errors.New("hold not held")

// resolveHeld moves a held hold to voided (expired when its time is up) and releases its reservation.
func resolveHeld(ctx context.Context, q *dbsqlc.Queries, accountID, holdID string) (Hold, error) {
	row, err := q.HoldsVoid(ctx, dbsqlc.HoldsVoidParams{AccountID: accountID, ID: holdID})
	if isNoRows(err) {
		return Hold{}, errNotHeld
	}
	if err != nil {
		return Hold{}, fmt.Errorf("void hold %s of %s: %w", holdID, accountID, MapError(err))
	}
	hold := holdFromRow(row)
	_, err = releaseHeld(ctx, q, hold)
	return hold, err
}

// expireOne resolves a hold found held past its expiry: HoldsVoid expires it, on the transaction's clock.
func expireOne(ctx context.Context, q *dbsqlc.Queries, accountID, holdID string) (Hold, error) {
	hold, err := resolveHeld(ctx, q, accountID, holdID)
	if err == nil && hold.Status != HoldExpired {
		err = fmt.Errorf("hold %s of %s was past its expiry, yet %s", holdID, accountID, hold.Status)
	}
	return hold, err
}

// resolvedErr is the answer for a hold that is no longer held.
func resolvedErr(h Hold) error {
	switch h.Status {
	case HoldCaptured:
		return fmt.Errorf("%w: hold %s of %s", ErrHoldCaptured, h.ID, h.AccountID)
	case HoldVoided:
		return fmt.Errorf("%w: hold %s of %s", ErrHoldVoided, h.ID, h.AccountID)
	case HoldExpired:
		return fmt.Errorf("%w: hold %s of %s at %s", ErrHoldExpired, h.ID, h.AccountID, h.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return nil
}

// lockHoldAccount locks the account row, with its pools, before any hold of it is resolved: every
// resolution (the API, expiry, billing) locks accounts first, roots first then in id order, so that they
// queue instead of deadlocking. A missing account has no holds.
func lockHoldAccount(ctx context.Context, q *dbsqlc.Queries, accountID, holdID string) error {
	pools, locked, err := lockTree(ctx, q, []string{accountID})
	if err != nil {
		return err
	}
	if _, ok := pools.parents[accountID]; !ok || len(locked) == 0 {
		return fmt.Errorf("hold %s of %s: %w", holdID, accountID, ErrHoldNotFound)
	}
	return nil
}

// releaseHeld releases a resolved hold's reservations, on the account (Amount - Pooled) and on each
// pool (its hold_reservations), and in the spend windows it was counted in, where what it captured (if
// anything) becomes spent. Returns the pools' reservations, nearest pool first.
func releaseHeld(ctx context.Context, q *dbsqlc.Queries, h Hold) ([]poolReservation, error) {
	if own := h.Amount - h.Pooled; own > 0 {
		if _, err := q.AccountsHeldRelease(ctx, dbsqlc.AccountsHeldReleaseParams{ID: h.AccountID, Amount: own}); err != nil {
			return nil, fmt.Errorf("release hold %s of %s: %w", h.ID, h.AccountID, MapError(err))
		}
	}
	var reserved []poolReservation
	if h.Pooled > 0 {
		rows, err := q.HoldsReleasePools(ctx, dbsqlc.HoldsReleasePoolsParams{AccountID: h.AccountID, HoldID: h.ID})
		if err != nil {
			return nil, fmt.Errorf("release hold %s of %s on its pools: %w", h.ID, h.AccountID, MapError(err))
		}
		for _, r := range rows {
			reserved = append(reserved, poolReservation{pool: r.PoolID, amount: r.Amount, depth: r.Depth})
		}
		slices.SortFunc(reserved, func(a, b poolReservation) int { return cmp.Compare(b.depth, a.depth) })
	}
	if len(h.LimitIDs) == 0 {
		return reserved, nil
	}
	err := q.SpendWindowsRelease(ctx, dbsqlc.SpendWindowsReleaseParams{
		AccountID: h.AccountID, LimitIDs: h.LimitIDs, WindowStarts: h.WindowStarts, HoldCreatedAt: h.CreatedAt,
		Amount: h.Amount, Captured: h.CapturedAmount,
	})
	if err != nil {
		return nil, fmt.Errorf("release hold %s of %s from its spend windows: %w", h.ID, h.AccountID, MapError(err))
	}
	return reserved, nil
}

// poolReservation is what one pool reserved for a hold.
type poolReservation struct {
	pool   string
	amount int64
	depth  int32
}

// postCapture posts a captured hold's usage through the one road, in one statement: on the hold's
// account what it reserved itself (Amount - Pooled), up to the captured amount, under HoldKey; the rest,
// on a member, by each pool up to what it reserved, nearest first, under HoldKey@pool with the member in
// on_behalf_of (SPEC §18). The account's entry comes first, 0 when its pools paid it all, so that every
// pool's part has its member's. Returns the account's entry, then the pools'.
func (l *Ledger) postCapture(ctx context.Context, tx Tx, h Hold, reserved []poolReservation) ([]Entry, error) {
	key := HoldKey(h.AccountID, h.ID)
	own := min(h.CapturedAmount, h.Amount-h.Pooled)
	postings := []Posting{{
		AccountID: h.AccountID, Kind: KindUsage, Amount: -own, Description: "hold " + h.ID, DedupeKey: key,
		Subject: h.Subject, Feature: h.Feature,
	}}
	left := h.CapturedAmount - own
	for _, r := range reserved {
		part := min(left, r.amount)
		if part == 0 {
			break
		}
		left -= part
		postings = append(postings, Posting{
			AccountID: r.pool, Kind: KindUsage, Amount: -part, Description: "hold " + h.ID + " of " + h.AccountID,
			DedupeKey: key + "@" + r.pool, Subject: h.Subject, Feature: h.Feature, OnBehalfOf: h.AccountID,
		})
	}
	if left != 0 {
		return nil, fmt.Errorf("hold %s of %s captured %d, %d more than it reserved", h.ID, h.AccountID, h.CapturedAmount, left)
	}
	rows, err := dbsqlc.New(tx).LedgerAppend(ctx, l.appendArgs(postings, nil))
	if err != nil {
		return nil, fmt.Errorf("insert the capture of hold %s of %s: %w", h.ID, h.AccountID, MapError(err))
	}
	entries, byRow := appended(rows, len(postings))
	out := make([]Entry, len(postings))
	for i, e := range byRow {
		if e == nil {
			// The hold was held until this transaction, so nothing can have posted its keys.
			return nil, fmt.Errorf("%w: key %q was posted while its hold was still held", ErrDedupeConflict, postings[i].DedupeKey)
		}
		out[i] = *e
	}
	if err := l.inserted(ctx, tx, entries); err != nil {
		return nil, err
	}
	return out, nil
}

// HoldsExpired is what one ExpireHolds call did.
type HoldsExpired struct {
	Holds    int64 // holds moved from held to expired
	Accounts int64 // accounts whose reservations were released
	Released int64 // the amount released
}

// expireBatch bounds the accounts one expiry transaction locks.
const expireBatch = 1000

// ExpireHolds expires every hold still held whose time is up on the database clock, set-based: per
// transaction, up to expireBatch accounts are locked with their pools (roots first, then in id order)
// and HoldsExpire expires their holds and releases their reservations in one statement. A capture racing it either resolved the hold
// first or finds it expired: both are conditional on status = 'held' under the same account lock.
func ExpireHolds(ctx context.Context, b Beginner) (HoldsExpired, error) {
	var out HoldsExpired
	for {
		var found int
		err := InTx(ctx, b, func(tx Tx) error {
			q := dbsqlc.New(tx)
			ids, err := q.HoldsExpiredAccounts(ctx, expireBatch)
			if err != nil || len(ids) == 0 {
				return err
			}
			found = len(ids)
			// With their pools, roots first: a member's hold releases what its pools reserved.
			pools, _, err := lockTree(ctx, q, ids)
			if err != nil {
				return err
			}
			var locked []string
			for _, id := range ids {
				if _, ok := pools.parents[id]; ok {
					locked = append(locked, id)
				}
			}
			rows, err := q.HoldsExpire(ctx, locked)
			if err != nil {
				return err
			}
			for _, r := range rows {
				out.Holds += r.Holds
				out.Released += r.Released
			}
			out.Accounts += int64(len(rows))
			return nil
		})
		if err != nil {
			return out, fmt.Errorf("expire holds: %w", MapError(err))
		}
		if found < expireBatch {
			return out, nil
		}
	}
}

// DecisionHold is a hold captured by billing its decision.
type DecisionHold struct {
	AccountID  string
	HoldID     string
	Amount     int64 // the hold's amount
	DecisionID string
	Cost       int64 // the decision's cost, billed in full even above Amount
}

// CaptureHoldsForDecisions runs in a billing transaction, after its usage insert, with the accounts
// the chunk (afterSeq, uptoSeq] locked: it captures, set-based, the holds named by the chunk's
// decisions of those accounts that are still held (captured_amount = least(cost, amount)) and releases
// their reservations. A hold resolved before is left as it was.
func CaptureHoldsForDecisions(ctx context.Context, tx Tx, afterSeq, uptoSeq int64, lockedAccounts []string) ([]DecisionHold, error) {
	rows, err := dbsqlc.New(tx).HoldsCaptureForDecisions(ctx, dbsqlc.HoldsCaptureForDecisionsParams{
		AccountIDs: lockedAccounts, AfterSeq: afterSeq, UptoSeq: uptoSeq,
	})
	if err != nil {
		return nil, fmt.Errorf("capture holds of decisions after seq %d: %w", afterSeq, MapError(err))
	}
	out := make([]DecisionHold, len(rows))
	for i, r := range rows {
		out[i] = DecisionHold{AccountID: r.AccountID, HoldID: r.ID, Amount: r.Amount, DecisionID: r.DecisionID, Cost: r.Cost}
	}
	return out, nil
}

// holdViolations checks the holds' invariants (SPEC §11, §18): accounts.held is what the holds in held
// reserved on the account (their own amount - pooled, and their members' reservations), and each hold's
// reservations sum to its pooled, on its pools; each hold was captured at most once, and a capture through the API posted exactly its amount
// under HoldKey; a decision naming a hold captured through the API before it was billed paid only its
// cost beyond the capture (no hold paid twice); no hold stays held more than grace past its expiry.
func holdViolations(ctx context.Context, q *dbsqlc.Queries, grace time.Duration) ([]Violation, error) {
	var out []Violation
	held, err := q.HoldsHeldMismatches(ctx)
	if err != nil {
		return nil, fmt.Errorf("check held amounts: %w", MapError(err))
	}
	for _, h := range held {
		out = append(out, Violation{"held", fmt.Sprintf("account %s: held %d, what holds in held reserved on it sums to %d", h.ID, h.Cached, h.HoldsSum)})
	}
	reservations, err := q.HoldsReservationMismatches(ctx)
	if err != nil {
		return nil, fmt.Errorf("check hold reservations: %w", MapError(err))
	}
	for _, r := range reservations {
		out = append(out, Violation{"held", fmt.Sprintf("hold %s of %s: pooled %d, its pools' reservations sum to %d, %d on an account that is not its pool",
			r.ID, r.AccountID, r.Pooled, r.Reserved, r.Elsewhere)})
	}

	captures, err := q.HoldsCaptureMismatches(ctx)
	if err != nil {
		return nil, fmt.Errorf("check hold captures: %w", MapError(err))
	}
	for _, c := range captures {
		detail := fmt.Sprintf("hold %s of %s: status %q, captured %d", c.HoldID, c.AccountID, c.Status, c.CapturedAmount)
		if c.HasEntry {
			detail += fmt.Sprintf(", entry %q of -%d", HoldKey(c.AccountID, c.HoldID), c.EntryAmount)
		} else {
			detail += ", no entry " + HoldKey(c.AccountID, c.HoldID)
		}
		out = append(out, Violation{"capture", detail})
	}

	twice, err := q.HoldsPaidTwice(ctx)
	if err != nil {
		return nil, fmt.Errorf("check holds paid twice: %w", MapError(err))
	}
	for _, p := range twice {
		out = append(out, Violation{"paid_twice", fmt.Sprintf("hold %s of %s: captured %d through the API, then decision %s (cost %d) billed %d",
			p.HoldID, p.AccountID, p.CapturedAmount, p.DecisionID, p.Cost, p.Billed)})
	}

	overdue, err := q.HoldsOverdue(ctx, grace.Seconds())
	if err != nil {
		return nil, fmt.Errorf("check overdue holds: %w", MapError(err))
	}
	for _, h := range overdue {
		out = append(out, Violation{"expiry", fmt.Sprintf("hold %s of %s (%d) still held, expired at %s",
			h.ID, h.AccountID, h.Amount, h.ExpiresAt.UTC().Format(time.RFC3339))})
	}
	return out, nil
}

// AuthoriseHoldGrouped is AuthoriseHold with group commit. Every authorisation on one account
// serialises on that account's row, so one transaction each caps a hot account at one fsync'd commit per
// hold; the authorisations of a tree's members serialise on the pools they draw on, the root's row
// above all. The Ledger gathers the concurrent authorisations of one tree (keyed by its root: an account
// without pools is its own root) for a few milliseconds and commits them in ONE transaction: the tree
// locked first, roots first, then for each account in the group, admission in arrival order against
// what its own row and its pools have left, and one statement that inserts the admitted holds under
// holds_pkey and reserves them on every level. A stored id is answered before admission (a replay or a
// conflict is never admitted again): the insert finds it taken and the group is planned again with its
// stored holds read first, and a member refused for want of balance has its id read before the refusal
// is final.
//
// To each caller, it is exactly AuthoriseHold: Created=false with the stored hold on a replay,
// ErrDedupeConflict, ErrInsufficientBalance, ErrAccountNotFound; one member's refusal never fails the
// others. A group that fails as a whole with a transient error answers that error to every member; any
// other failure is resolved by authorising its members one transaction each. It returns once the group
// committed (or failed).
func (l *Ledger) AuthoriseHoldGrouped(ctx context.Context, accountID string, req HoldRequest) (HoldAuthorised, error) {
	root, err := l.rootOf(ctx, accountID)
	if err != nil {
		return HoldAuthorised{}, err
	}
	return l.holds.do(ctx, root, accountHold{account: accountID, HoldRequest: req})
}

// accountHold is one authorisation waiting in its tree's group: the account and what it asks.
type accountHold struct {
	account string
	HoldRequest
}

type authMember = groupMember[accountHold, HoldAuthorised]

func (l *Ledger) commitHolds(root string, _ *struct{}, group []*authMember) {
	ctx, cancel, span := groupContext(l.cfg.Tracing, "group_commit.holds", group)
	defer cancel()
	defer span.End()
	if len(group) > 1 {
		var (
			err     error
			readIDs bool // the first attempt assumes every id is new, the common case
		)
		for range regroupAttempts {
			err = l.authoriseGroup(ctx, group, readIDs)
			if errors.Is(err, errRegroup) {
				readIDs = true
				continue
			}
			if !lostLockRace(err) {
				break
			}
		}
		switch {
		case err == nil:
			return
		case IsTransient(err) && !lostLockRace(err) && !errors.Is(err, errRegroup):
			if !errors.Is(err, ErrTransient) {
				err = fmt.Errorf("%w: %w", ErrTransient, err)
			}
			for _, m := range group {
				m.reply(HoldAuthorised{}, err)
			}
			return
		}
	}
	for _, m := range group {
		m.reply(authoriseHold(ctx, l.pool, PendingAuditOf(m.ctx), m.req.account, m.req.HoldRequest))
	}
}

// authoriseGroup runs one group in one transaction and, once it committed, answers every member.
// With readIDs, the group's stored holds are read first, so that replays and conflicts are planned as
// such; without, every id is assumed new and a taken one (HoldsInsertGroup returns no row for it) rolls
// the group back with errRegroup. Skipping the read keeps the common case of one account at five
// statements: its pools read, the tree's lock, its spend windows opened, the insert with its
// reservations, then the records of the requests whose holds it inserted (PendingAudit), in one
// statement; each more account of the tree in the group adds its windows and its insert, and each
// account whose holds draw on its pools the pools' reservations.
func (l *Ledger) authoriseGroup(ctx context.Context, group []*authMember, readIDs bool) error {
	var (
		answers []groupAnswer[HoldAuthorised]
		audited []*PendingAudit
	)
	var accounts []string // the group's accounts, in order of first arrival
	seen := map[string]bool{}
	for _, m := range group {
		if !seen[m.req.account] {
			seen[m.req.account] = true
			accounts = append(accounts, m.req.account)
		}
	}
	err := InTx(ctx, l.pool, func(tx Tx) error {
		q := dbsqlc.New(tx)
		pools, rows, err := lockTree(ctx, q, accounts)
		if err != nil {
			return fmt.Errorf("lock accounts %v: %w", accounts, err)
		}
		byAccount := make(map[string]*accountHolds, len(accounts))
		for _, account := range accounts {
			if _, ok := pools.parents[account]; !ok {
				return errPostAlone
			}
			a := &accountHolds{stored: map[string]Hold{}}
			if a.windows, err = openWindows(ctx, q, account); err != nil {
				return err
			}
			if readIDs {
				if a.stored, err = storedHolds(ctx, q, account, holdIDs(group, nil, account)); err != nil {
					return err
				}
			}
			byAccount[account] = a
		}
		plan := planHolds(group, pools, roomOf(rows), byAccount)
		if refused := plan.refused(); !readIDs && len(refused) > 0 {
			// A refusal is final only for an id never held: a retried authorisation is a replay (or
			// a conflict) however the balance moved since. Refused members claim nothing, so reading
			// their ids and planning again changes nothing for the others but their duplicates.
			for _, account := range accounts {
				if byAccount[account].stored, err = storedHolds(ctx, q, account, holdIDs(group, refused, account)); err != nil {
					return err
				}
			}
			plan = planHolds(group, pools, roomOf(rows), byAccount)
		}
		answers = plan.answers
		if err := insertAdmitted(ctx, q, accounts, byAccount, group, plan); err != nil {
			return err
		}
		for i, first := range plan.duplicateOf {
			answers[i] = settledHold(answers[first].ans.Hold, group[i].req.HoldRequest, group[i].req.account)
		}
		effects := make([]*PendingAudit, len(plan.admit))
		for k, i := range plan.admit {
			effects[k] = PendingAuditOf(group[i].ctx)
		}
		audited, err = recordEffects(ctx, tx, effects...)
		return err
	})
	if err != nil {
		return err
	}
	markWritten(audited)
	for i, m := range group {
		if a := answers[i]; a.err == nil && !a.ans.Created {
			PendingAuditOf(m.ctx).markReplay()
		}
		m.reply(answers[i].ans, answers[i].err)
	}
	return nil
}

// insertAdmitted inserts, in the group's transaction, the holds plan admitted, with their reservations on
// their pools, and sets their answers: HoldsInsertGroup for a group of one account, HoldsInsertTreeGroup
// (the same rows and conditions for several accounts at once) for a group of a tree's accounts. Every
// condition is checked again by the statements on the locked rows: a false flag means the plan was wrong,
// and the group rolls back.
func insertAdmitted(ctx context.Context, q *dbsqlc.Queries, accounts []string, byAccount map[string]*accountHolds, group []*authMember, plan holdsPlan) error {
	if len(plan.admit) == 0 {
		return nil
	}
	on := make([]string, len(plan.admit))
	admitted := make([]HoldRequest, len(plan.admit))
	parts := make([]holdParts, len(plan.admit))
	for k, i := range plan.admit {
		on[k], admitted[k], parts[k] = group[i].req.account, group[i].req.HoldRequest, plan.parts[i]
	}
	var inserted []dbsqlc.HoldsInsertGroupRow
	if len(accounts) == 1 {
		rows, err := q.HoldsInsertGroup(ctx, holdsInsertParams(accounts[0], admitted, byAccount[accounts[0]].windows, parts))
		if err != nil {
			return fmt.Errorf("insert %d holds of %s: %w", len(admitted), accounts[0], err)
		}
		inserted = rows
	} else {
		arg := dbsqlc.HoldsInsertTreeGroupParams{}
		for k, r := range admitted {
			one := holdsInsertParams(on[k], []HoldRequest{r}, byAccount[on[k]].windows, parts[k:k+1])
			arg.AccountIDs = append(arg.AccountIDs, on[k])
			arg.IDs = append(arg.IDs, one.IDs...)
			arg.Amounts = append(arg.Amounts, one.Amounts...)
			arg.ExpiresInSeconds = append(arg.ExpiresInSeconds, one.ExpiresInSeconds...)
			arg.Subjects = append(arg.Subjects, one.Subjects...)
			arg.Features = append(arg.Features, one.Features...)
			arg.Pooled = append(arg.Pooled, one.Pooled...)
			for range one.PairHoldIDs {
				arg.PairAccountIDs = append(arg.PairAccountIDs, on[k])
			}
			arg.PairHoldIDs = append(arg.PairHoldIDs, one.PairHoldIDs...)
			arg.PairLimitIDs = append(arg.PairLimitIDs, one.PairLimitIDs...)
			arg.PairWindowStarts = append(arg.PairWindowStarts, one.PairWindowStarts...)
		}
		rows, err := q.HoldsInsertTreeGroup(ctx, arg)
		if err != nil {
			return fmt.Errorf("insert %d holds of %v: %w", len(admitted), accounts, err)
		}
		for _, r := range rows {
			inserted = append(inserted, dbsqlc.HoldsInsertGroupRow(r))
		}
	}
	if len(inserted) != len(admitted) {
		return errRegroup
	}
	if !inserted[0].Reserved {
		return fmt.Errorf("available balances of %v moved under the group's lock: the admitted holds no longer fit", accounts)
	}
	if !inserted[0].WithinLimits {
		return fmt.Errorf("spend windows of %v moved under the group's lock: the admitted holds no longer fit", accounts)
	}
	if reserved, err := reservePools(ctx, q, on, admitted, parts); err != nil {
		return err
	} else if !reserved {
		return fmt.Errorf("the pools of %v moved under the group's lock: the admitted holds no longer fit", accounts)
	}
	type key struct{ account, id string }
	byID := make(map[key]Hold, len(inserted))
	for _, r := range inserted {
		byID[key{r.AccountID, r.ID}] = holdFromInserted(r)
	}
	for _, i := range plan.admit {
		plan.answers[i].ans = HoldAuthorised{Hold: byID[key{group[i].req.account, group[i].req.ID}], Created: true}
	}
	return nil
}

// accountHolds is what the group's plan knows of one of its accounts: its current spend windows and
// its stored holds among the group's ids (read only when the group is planned again).
type accountHolds struct {
	windows spendWindows
	stored  map[string]Hold
}

// holdsPlan is what one group of authorisations will do, decided in arrival order against the
// locked available balances and spend windows.
type holdsPlan struct {
	answers     []groupAnswer[HoldAuthorised] // final for members neither admitted nor duplicates
	admit       []int                         // members to insert, in order
	parts       map[int]holdParts             // admitted member → what its account's pools reserve of it
	duplicateOf map[int]int                   // member → the earlier member of the group that claims its id
}

// planHolds is the sequence of single authorisations, replayed in memory: a stored id is answered as a
// replay or a conflict before admission is considered; each other member is admitted against what its
// account and its pools have left after the admitted members before it, whatever their account (room,
// from the locked rows), and the room in the windows of its account's limits that apply to it; an id
// claimed earlier in the group on the same account makes it a replay or a conflict of that member. A
// refused member claims nothing, as its own transaction would have rolled back.
func planHolds(group []*authMember, pools poolsOf, room map[string]int64, accounts map[string]*accountHolds) holdsPlan {
	plan := holdsPlan{answers: make([]groupAnswer[HoldAuthorised], len(group)), parts: map[int]holdParts{}, duplicateOf: map[int]int{}}
	type claim struct{ account, id string }
	claimed := map[claim]int{}
	taken := map[string][]int64{} // what the admitted members took of each window, by account
	for i, m := range group {
		r, a := m.req, accounts[m.req.account]
		if prior, ok := a.stored[r.ID]; ok {
			plan.answers[i] = settledHold(prior, r.HoldRequest, r.account)
			continue
		}
		if first, ok := claimed[claim{r.account, r.ID}]; ok {
			plan.duplicateOf[i] = first
			continue
		}
		levels := newReserver(pools, room, r.account)
		if r.Amount > levels.total() {
			plan.answers[i].err = fmt.Errorf("hold %d on %s: %w", r.Amount, r.account, ErrInsufficientBalance)
			continue
		}
		if taken[r.account] == nil {
			taken[r.account] = make([]int64, len(a.windows))
		}
		if err := a.windows.refusal(r.HoldRequest, taken[r.account]); err != nil {
			plan.answers[i].err = err
			continue
		}
		a.windows.take(r.HoldRequest, taken[r.account])
		plan.parts[i] = levels.reserve(r.Amount)
		claimed[claim{r.account, r.ID}] = i
		plan.admit = append(plan.admit, i)
	}
	return plan
}

// refused returns the members the plan refused for want of available balance: its only errors.
func (plan holdsPlan) refused() []int {
	var out []int
	for i, a := range plan.answers {
		if a.err != nil {
			out = append(out, i)
		}
	}
	return out
}

// holdIDs returns the hold ids of account's members among those at the given indexes, or among every
// member when nil.
func holdIDs(group []*authMember, members []int, account string) []string {
	if members == nil {
		members = make([]int, len(group))
		for i := range group {
			members[i] = i
		}
	}
	var ids []string
	for _, i := range members {
		if group[i].req.account == account {
			ids = append(ids, group[i].req.ID)
		}
	}
	return ids
}

// storedHolds returns the account's holds among ids, by id.
func storedHolds(ctx context.Context, q *dbsqlc.Queries, account string, ids []string) (map[string]Hold, error) {
	if len(ids) == 0 {
		return map[string]Hold{}, nil
	}
	rows, err := q.HoldsGetByIDs(ctx, dbsqlc.HoldsGetByIDsParams{AccountID: account, IDs: ids})
	if err != nil {
		return nil, fmt.Errorf("read %d holds of %s: %w", len(ids), account, err)
	}
	stored := make(map[string]Hold, len(rows))
	for _, r := range rows {
		stored[r.ID] = holdFromRow(r)
	}
	return stored, nil
}

// settledHold answers an authorisation whose id is held already: a replay with the same amount, a
// conflict with another.
func settledHold(prior Hold, r HoldRequest, account string) groupAnswer[HoldAuthorised] {
	if prior.Amount != r.Amount {
		return groupAnswer[HoldAuthorised]{ans: HoldAuthorised{Hold: prior}, err: fmt.Errorf("%w: hold %s of %s holds %d, asked for %d",
			ErrDedupeConflict, r.ID, account, prior.Amount, r.Amount)}
	}
	return groupAnswer[HoldAuthorised]{ans: HoldAuthorised{Hold: prior}}
}
