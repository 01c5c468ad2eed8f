package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/onceledger/onceledger/db/dbsqlc"
)

const (
	maxDecisionsPerCall = 10_000
	// decisionsBody bounds a batch: a full batch of long ids and timestamps fits with room to spare.
	decisionsBody = 4 << 20
)

type decisionJSON struct {
	ID         string  `json:"id"`
	AccountID  string  `json:"account_id"`
	Cost       *int64  `json:"cost"`
	OccurredAt *string `json:"occurred_at"`
	HoldID     string  `json:"hold_id"` // empty: none
}

// handlePostDecisions stores a batch of decisions in one statement, idempotently by decision id
// (decisions_pkey). The whole batch is checked before anything is written, so a bad item writes
// nothing. An id stored before (or earlier in the batch) with the same account and cost is a
// duplicate; with another account, cost or hold it is a conflict, reported and left as first stored.
func handlePostDecisions(d Deps) http.Handler {
	type response struct {
		Accepted   int      `json:"accepted"`
		Duplicates int      `json:"duplicates"`
		Conflicts  []string `json:"conflicts"`
	}
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		var batch []decisionJSON
		if err := decodeJSON(w, r, decisionsBody, &batch); err != nil {
			return err
		}
		if err := checkDecisions(batch); err != nil {
			return err
		}

		// The first occurrence of an id is the one offered for storage; later ones are compared with it.
		now := time.Now().UTC()
		occurredAt := make([]time.Time, len(batch))
		for i, dec := range batch {
			occurredAt[i] = now
			if dec.OccurredAt != nil {
				occurredAt[i], _ = time.Parse(time.RFC3339Nano, *dec.OccurredAt) // checked by checkDecisions
			}
		}
		first := make(map[string]bool, len(batch))
		params := dbsqlc.DecisionsInsertParams{}
		for i, dec := range batch {
			if first[dec.ID] {
				continue
			}
			first[dec.ID] = true
			params.Ids = append(params.Ids, dec.ID)
			params.AccountIds = append(params.AccountIds, dec.AccountID)
			params.Costs = append(params.Costs, *dec.Cost)
			params.OccurredAts = append(params.OccurredAts, occurredAt[i])
			params.HoldIds = append(params.HoldIds, dec.HoldID)
		}
		q := dbsqlc.New(d.Pool)
		inserted, err := q.DecisionsInsert(r.Context(), params)
		if err != nil {
			return fmt.Errorf("store %d decisions: %w", len(params.Ids), err)
		}
		// What is stored now, for every id: the inserted rows and those stored before this call.
		rows, err := q.DecisionsGet(r.Context(), params.Ids)
		if err != nil {
			return fmt.Errorf("read back %d decisions: %w", len(params.Ids), err)
		}
		stored := make(map[string]dbsqlc.Decision, len(rows))
		for _, row := range rows {
			stored[row.ID] = row
		}
		newlyStored := make(map[string]bool, len(inserted))
		for _, id := range inserted {
			newlyStored[id] = true
		}

		out := response{Accepted: len(inserted), Conflicts: []string{}}
		conflicted := map[string]bool{}
		offered := map[string]bool{}
		for _, dec := range batch {
			row := stored[dec.ID]
			switch {
			case row.AccountID != dec.AccountID || row.Cost != *dec.Cost || storedHoldID(row) != dec.HoldID:
				if !conflicted[dec.ID] {
					conflicted[dec.ID] = true
					out.Conflicts = append(out.Conflicts, dec.ID)
				}
			case newlyStored[dec.ID] && !offered[dec.ID]:
				// Counted in Accepted.
			default:
				out.Duplicates++
			}
			offered[dec.ID] = true
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}

// storedHoldID is the stored decision's hold id, empty when it names none.
func storedHoldID(row dbsqlc.Decision) string {
	if row.HoldID == nil {
		return ""
	}
	return *row.HoldID
}

// checkDecisions refuses a batch with any bad item, naming the item and the field.
func checkDecisions(batch []decisionJSON) error {
	if batch == nil {
		return badRequest("invalid_json", "body must be a JSON array of decisions")
	}
	if len(batch) == 0 {
		return badRequest("empty_batch", "send at least one decision")
	}
	if len(batch) > maxDecisionsPerCall {
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: "too_many_decisions",
			Message: fmt.Sprintf("at most %d decisions per call, got %d", maxDecisionsPerCall, len(batch))}
	}
	for i, dec := range batch {
		switch {
		case !decisionIDPattern.MatchString(dec.ID):
			return badRequest("invalid_id", fmt.Sprintf("decision %d: id must be 1-128 characters of [A-Za-z0-9_.:-]", i))
		case !accountIDPattern.MatchString(dec.AccountID):
			return badRequest("invalid_account_id", fmt.Sprintf("decision %d (%s): account_id must be 1-64 characters of [A-Za-z0-9_.:-]", i, dec.ID))
		case dec.Cost == nil || *dec.Cost <= 0 || *dec.Cost > maxAmount:
			return badRequest("invalid_cost", fmt.Sprintf("decision %d (%s): cost is required: a positive whole number of minor units, at most 10^15", i, dec.ID))
		case dec.HoldID != "" && !holdIDPattern.MatchString(dec.HoldID):
			return badRequest("invalid_hold_id", fmt.Sprintf("decision %d (%s): hold_id must be 1-128 characters of [A-Za-z0-9_.:-]", i, dec.ID))
		}
		if dec.OccurredAt != nil {
			if _, err := time.Parse(time.RFC3339Nano, *dec.OccurredAt); err != nil {
				return badRequest("invalid_occurred_at", fmt.Sprintf("decision %d (%s): occurred_at must be an RFC 3339 timestamp", i, dec.ID))
			}
		}
	}
	return nil
}
