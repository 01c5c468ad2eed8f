package db

import (
	"context"
	"fmt"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// TimelineEntry is an entry with its account's balance right after it.
type TimelineEntry struct {
	Entry
	BalanceAfter int64
}

// AccountTimeline returns the account's newest entries, at most limit, newest first, each with the
// balance its account had right after it, summed from the ledger (LedgerTimelineByAccount).
func AccountTimeline(ctx context.Context, q Conn, accountID string, limit int32) ([]TimelineEntry, error) {
	rows, err := dbsqlc.New(q).LedgerTimelineByAccount(ctx, dbsqlc.LedgerTimelineByAccountParams{AccountID: accountID, MaxRows: limit})
	if err != nil {
		return nil, fmt.Errorf("timeline of %s: %w", accountID, MapError(err))
	}
	out := make([]TimelineEntry, len(rows))
	for i, r := range rows {
		out[i] = TimelineEntry{
			Entry: Entry{
				ID: r.ID, AccountID: accountID, Kind: r.Kind, Amount: r.Amount, Description: r.Description,
				DedupeKey: deref(r.DedupeKey), PaymentIntent: deref(r.PaymentIntent), CreatedAt: r.CreatedAt,
				Subject: deref(r.Subject), Feature: deref(r.Feature),
			},
			BalanceAfter: r.BalanceAfter,
		}
	}
	return out, nil
}

// PaymentEntries returns the entries of one Stripe payment (credit, reversals, restores) in posting
// order, at most limit.
func PaymentEntries(ctx context.Context, q Conn, paymentIntent string, limit int32) ([]Entry, error) {
	rows, err := dbsqlc.New(q).LedgerListByPaymentIntent(ctx, dbsqlc.LedgerListByPaymentIntentParams{PaymentIntent: paymentIntent, MaxRows: limit})
	if err != nil {
		return nil, fmt.Errorf("entries of payment %s: %w", paymentIntent, MapError(err))
	}
	out := make([]Entry, len(rows))
	for i, r := range rows {
		out[i] = entryFromRow(dbsqlc.LedgerGetByDedupeKeyRow(r))
	}
	return out, nil
}

// EntryByDedupeKey returns the entry posted under key, or ErrNotFound.
func EntryByDedupeKey(ctx context.Context, q Conn, key string) (Entry, error) {
	row, err := dbsqlc.New(q).LedgerGetByDedupeKey(ctx, key)
	if isNoRows(err) {
		return Entry{}, fmt.Errorf("entry with key %q: %w", key, ErrNotFound)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("entry with key %q: %w", key, MapError(err))
	}
	return entryFromRow(row), nil
}

// PresentEntryIDs tells which of ids the ledger holds as q sees it: inside a transaction, entries it
// inserted count, and entries whose savepoint was rolled back do not.
func PresentEntryIDs(ctx context.Context, q Conn, ids []int64) (map[int64]bool, error) {
	present, err := dbsqlc.New(q).LedgerPresentIDs(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("look up %d entries: %w", len(ids), MapError(err))
	}
	out := make(map[int64]bool, len(present))
	for _, id := range present {
		out[id] = true
	}
	return out, nil
}
