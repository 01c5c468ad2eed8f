package stripeevents

import (
	"context"
	"fmt"

	"github.com/riverqueue/river"

	"github.com/onceledger/onceledger/db"
)

// reapplyQueue is River's queue for re-applying parked events.
const reapplyQueue = "stripe_events"

// ReapplyArgs is the job that re-applies a parked event after the top-up that recorded its payment
// committed: enqueued in that top-up's transaction when the event needs the Stripe API (a
// charge.refunded whose refund list could not be fetched beforehand), so the credit never waits on
// Stripe. Unique per event while the job exists.
type ReapplyArgs struct {
	EventID string `json:"event_id" river:"unique"`
}

// Kind names the job in river_job.kind.
func (ReapplyArgs) Kind() string { return "stripe_event_reapply" }

// AddWorkers registers, for the process's River client, the worker re-applying p's parked events, on
// its own queue. River's default backoff (attempt⁴ seconds, 25 attempts) covers a Stripe outage of
// days; every attempt is a Replay, so however often it runs it posts once.
func AddWorkers(workers *river.Workers, queues map[string]river.QueueConfig, p *Processor) {
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[ReapplyArgs]) error {
		_, err := p.Replay(ctx, job.Args.EventID)
		return err
	}))
	queues[reapplyQueue] = river.QueueConfig{MaxWorkers: 2}
}

// Reapplier enqueues re-applications through the process's River client (Processor.Reapply).
type Reapplier struct {
	jobs *river.Client[db.Tx]
}

// NewReapplier enqueues through jobs, the process's River client; the worker AddWorkers registered
// with it re-applies what it enqueues.
func NewReapplier(jobs *river.Client[db.Tx]) *Reapplier {
	return &Reapplier{jobs: jobs}
}

// enqueue inserts, in tx, the job re-applying eventID after tx commits.
func (r *Reapplier) enqueue(ctx context.Context, tx db.Tx, eventID string) error {
	_, err := r.jobs.InsertTx(ctx, tx, ReapplyArgs{EventID: eventID}, &river.InsertOpts{Queue: reapplyQueue})
	if err != nil {
		return fmt.Errorf("enqueue re-application of %s: %w", eventID, err)
	}
	return nil
}
