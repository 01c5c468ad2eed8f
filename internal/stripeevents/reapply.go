package stripeevents

import (
	"context"
	"errors"
	"fmt"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/onceledger/onceledger/db"
)

// reapplyQueue is River's queue for re-applying parked events; the Reapplier's client works no other.
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

// Reapplier enqueues and, once started, works the re-application jobs. It shares River's tables with
// the notifications, on its own queue.
type Reapplier struct {
	pool   *db.Pool
	client *river.Client[db.Tx]
}

// NewReapplier prepares the jobs of p on pool's database and sets p.Reapply to it. It enqueues at
// once; it works jobs only after Start. River's default backoff (attempt⁴ seconds, 25 attempts) covers
// a Stripe outage of days; every attempt is a Replay, so however often it runs it posts once.
func NewReapplier(pool *db.Pool, p *Processor) (*Reapplier, error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[ReapplyArgs]) error {
		_, err := p.Replay(ctx, job.Args.EventID)
		return err
	}))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:  p.Log,
		Workers: workers,
		Queues:  map[string]river.QueueConfig{reapplyQueue: {MaxWorkers: 2}},
	})
	if err != nil {
		return nil, fmt.Errorf("stripe events: %w", err)
	}
	r := &Reapplier{pool: pool, client: client}
	p.Reapply = r
	return r, nil
}

// enqueue inserts, in tx, the job re-applying eventID after tx commits.
func (r *Reapplier) enqueue(ctx context.Context, tx db.Tx, eventID string) error {
	_, err := r.client.InsertTx(ctx, tx, ReapplyArgs{EventID: eventID}, &river.InsertOpts{Queue: reapplyQueue})
	if err != nil {
		return fmt.Errorf("enqueue re-application of %s: %w", eventID, err)
	}
	return nil
}

// Start works the jobs, committed before or after it, until Stop. It refuses to start on a database
// whose River tables are missing or behind.
func (r *Reapplier) Start(ctx context.Context) error {
	if err := db.CheckRiverTables(ctx, r.pool); err != nil {
		return err
	}
	if err := r.client.Start(ctx); err != nil {
		return fmt.Errorf("start re-applying parked events (has `onceledger migrate up` run?): %w", err)
	}
	return nil
}

// Stop lets jobs in flight finish; those cancelled when ctx ends run again after the next start.
func (r *Reapplier) Stop(ctx context.Context) error {
	err := r.client.Stop(ctx)
	if err == nil {
		return nil
	}
	if cancelErr := r.client.StopAndCancel(context.WithoutCancel(ctx)); cancelErr != nil {
		return fmt.Errorf("stop re-applying parked events: %w", errors.Join(err, cancelErr))
	}
	return nil
}
