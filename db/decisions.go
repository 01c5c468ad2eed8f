package db

import (
	"context"
	"fmt"
	"time"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// Decision is one billable decision as the product reports it.
type Decision struct {
	ID         string
	AccountID  string
	Cost       int64
	OccurredAt time.Time
	HoldID     string // empty: none; billing the decision captures this hold of its account
	Subject    string // empty: none; who spent, matched against subject limits
	Feature    string // empty: none; what was spent on, matched against feature limits
}

// DecisionsStored is the outcome of StoreDecisions, counted over the batch as offered.
type DecisionsStored struct {
	// Accepted counts the decisions this call stored.
	Accepted int
	// Duplicates counts the items whose id was stored before (or earlier in the batch) with the same
	// account, cost, hold, subject and feature.
	Duplicates int
	// Conflicts names, once each and in batch order, the ids stored with another account, cost, hold,
	// subject or feature.
	Conflicts []string
}

// StoreDecisions stores a batch in one statement, idempotently by decision id (decisions_pkey): the
// first occurrence of an id in the batch is the one offered, and an id already stored is left as it
// was. It then reads back what is stored for every id to tell a duplicate (same account, cost and
// hold) from a conflict (another account, cost or hold), which is reported and never overwritten. The
// request's record (PendingAudit) commits with the decisions it stored; a batch that stored none is a
// replay.
func StoreDecisions(ctx context.Context, b Beginner, batch []Decision) (DecisionsStored, error) {
	var out DecisionsStored
	err := InAuditedTx(ctx, b, func(tx Tx) (changed bool, err error) {
		out, err = storeDecisions(ctx, tx, batch)
		return out.Accepted > 0, err
	})
	return out, err
}

func storeDecisions(ctx context.Context, q Conn, batch []Decision) (DecisionsStored, error) {
	first := make(map[string]bool, len(batch))
	var params dbsqlc.DecisionsInsertParams
	for _, d := range batch {
		if first[d.ID] {
			continue
		}
		first[d.ID] = true
		params.IDs = append(params.IDs, d.ID)
		params.AccountIDs = append(params.AccountIDs, d.AccountID)
		params.Costs = append(params.Costs, d.Cost)
		params.OccurredAts = append(params.OccurredAts, d.OccurredAt)
		params.HoldIDs = append(params.HoldIDs, d.HoldID)
		params.Subjects = append(params.Subjects, d.Subject)
		params.Features = append(params.Features, d.Feature)
	}
	queries := dbsqlc.New(q)
	inserted, err := queries.DecisionsInsert(ctx, params)
	if err != nil {
		return DecisionsStored{}, fmt.Errorf("store %d decisions: %w", len(params.IDs), MapError(err))
	}
	// What is stored now, for every id: the inserted rows and those stored before this call.
	rows, err := queries.DecisionsGet(ctx, params.IDs)
	if err != nil {
		return DecisionsStored{}, fmt.Errorf("read back %d decisions: %w", len(params.IDs), MapError(err))
	}
	stored := make(map[string]dbsqlc.Decision, len(rows))
	for _, row := range rows {
		stored[row.ID] = row
	}
	newlyStored := make(map[string]bool, len(inserted))
	for _, id := range inserted {
		newlyStored[id] = true
	}

	out := DecisionsStored{Accepted: len(inserted), Conflicts: []string{}}
	conflicted := map[string]bool{}
	offered := map[string]bool{}
	for _, d := range batch {
		row := stored[d.ID]
		switch {
		case row.AccountID != d.AccountID || row.Cost != d.Cost || deref(row.HoldID) != d.HoldID ||
			deref(row.Subject) != d.Subject || deref(row.Feature) != d.Feature:
			if !conflicted[d.ID] {
				conflicted[d.ID] = true
				out.Conflicts = append(out.Conflicts, d.ID)
			}
		case newlyStored[d.ID] && !offered[d.ID]:
			// Counted in Accepted.
		default:
			out.Duplicates++
		}
		offered[d.ID] = true
	}
	return out, nil
}
