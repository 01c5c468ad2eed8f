package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/onceledger/onceledger/db"
)

// Discarded is a notification whose attempts ran out: River keeps its job as discarded.
type Discarded struct {
	ID          string // the notification's id (its Idempotency-Key), ntf_{entry id}
	AccountID   string
	EntryKind   string
	Amount      int64
	Attempts    int
	LastError   string // the last attempt's error, empty when River recorded none
	FinalizedAt time.Time
}

// ListDiscarded returns the given-up notifications, most recently given up first, at most limit of
// them. It asks River, through jobs (the process's River client), so that River's table stays River's
// business.
func ListDiscarded(ctx context.Context, jobs *river.Client[db.Tx], limit int) ([]Discarded, error) {
	res, err := jobs.JobList(ctx, river.NewJobListParams().
		Kinds(Args{}.Kind()).
		States(rivertype.JobStateDiscarded).
		OrderBy(river.JobListOrderByFinalizedAt, river.SortOrderDesc).
		First(limit))
	if err != nil {
		return nil, fmt.Errorf("list discarded notifications: %w", err)
	}
	out := make([]Discarded, 0, len(res.Jobs))
	for _, job := range res.Jobs {
		var args Args
		if err := json.Unmarshal(job.EncodedArgs, &args); err != nil {
			return nil, fmt.Errorf("notification job %d: %w", job.ID, err)
		}
		d := Discarded{
			ID: args.ID, AccountID: args.AccountID, EntryKind: args.EntryKind, Amount: args.Amount,
			Attempts: job.Attempt,
		}
		if n := len(job.Errors); n > 0 {
			d.LastError = job.Errors[n-1].Error
		}
		if job.FinalizedAt != nil {
			d.FinalizedAt = *job.FinalizedAt
		}
		out = append(out, d)
	}
	return out, nil
}
