package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/onceledger/onceledger/db"
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
	Subject    string  `json:"subject"` // empty: none
	Feature    string  `json:"feature"` // empty: none
}

// handlePostDecisions stores a batch of decisions in one statement, idempotently by decision id
// (decisions_pkey). The whole batch is checked before anything is written, so a bad item writes
// nothing. An id stored before (or earlier in the batch) with the same account, cost, hold, subject
// and feature is a duplicate; with another it is a conflict, reported and left as first stored.
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

		now := time.Now().UTC()
		decisions := make([]db.Decision, len(batch))
		for i, dec := range batch {
			decisions[i] = db.Decision{
				ID: dec.ID, AccountID: dec.AccountID, Cost: *dec.Cost, OccurredAt: now, HoldID: dec.HoldID,
				Subject: dec.Subject, Feature: dec.Feature,
			}
			if dec.OccurredAt != nil {
				decisions[i].OccurredAt, _ = time.Parse(time.RFC3339Nano, *dec.OccurredAt) // checked by checkDecisions
			}
		}
		stored, err := db.StoreDecisions(r.Context(), d.Pool, decisions)
		if err != nil {
			return err
		}
		out := response{Accepted: stored.Accepted, Duplicates: stored.Duplicates, Conflicts: stored.Conflicts}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
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
		case dec.Subject != "" && !subjectPattern.MatchString(dec.Subject):
			return badRequest("invalid_subject", fmt.Sprintf("decision %d (%s): subject must be 1-128 characters of [A-Za-z0-9_.:@-]", i, dec.ID))
		case dec.Feature != "" && !featurePattern.MatchString(dec.Feature):
			return badRequest("invalid_feature", fmt.Sprintf("decision %d (%s): feature must be 1-64 characters of [A-Za-z0-9_.:-]", i, dec.ID))
		}
		if dec.OccurredAt != nil {
			if _, err := time.Parse(time.RFC3339Nano, *dec.OccurredAt); err != nil {
				return badRequest("invalid_occurred_at", fmt.Sprintf("decision %d (%s): occurred_at must be an RFC 3339 timestamp", i, dec.ID))
			}
		}
	}
	return nil
}
