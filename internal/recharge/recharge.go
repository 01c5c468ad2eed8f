// Package recharge carries out what the database decided (SPEC §13): the trigger
// accounts_available_watch inserts a recharge attempt, with the pending order it owns, in the
// transaction of the debit that took an account below its threshold, and balance alerts when
// available crosses an alert threshold. Those rows are the outbox: the Sweeper turns them, in one
// transaction that marks them taken, into River jobs (unique per attempt or notification id), so a
// crash anywhere after the debit commits loses nothing. The Charger's job creates the attempt's
// off-session PaymentIntent with Idempotency-Key recharge:{attempt id}, so a retried job (after a
// crash, a timeout, a lost answer) gets Stripe's first PaymentIntent back instead of a second charge.
// No money moves here: only payment_intent.succeeded, through the webhook, credits the order.
//
// The failure ladder (SPEC §17): a soft failure schedules the episode's next try (failed attempts
// carry retry_at, an outbox too); the Sweeper enqueues a RetryArgs job scheduled then, and its work only
// raises the account's retry number. The database's trigger makes the retry at that commit, under the
// same budget and cooldown as any attempt, with a new attempt id and so a new Idempotency-Key.
//
// The status (SPEC §17) is stored and moved in the transaction of each change, which records it in an
// outbox too (recharge_status_changes); the Sweeper moves the statuses that end with time, then turns
// every change into one recharge.status_changed.
package recharge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/client"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/notify"
)

// queue is River's queue for the PaymentIntent jobs.
const queue = "recharge"

// Args is the job creating one attempt's PaymentIntent; unique per attempt while the job exists.
type Args struct {
	AccountID string `json:"account_id" river:"unique"`
	AttemptID int64  `json:"attempt_id" river:"unique"`
}

// Kind names the job in river_job.kind.
func (Args) Kind() string { return "recharge_payment_intent" }

// RetryArgs is the failure ladder's job opening the next try of an episode after the failed try Retry;
// unique per attempt that failed.
type RetryArgs struct {
	AccountID string `json:"account_id" river:"unique"`
	AttemptID int64  `json:"attempt_id" river:"unique"`
	Episode   int64  `json:"episode"`
	Retry     int32  `json:"retry"`
}

// Kind names the job in river_job.kind.
func (RetryArgs) Kind() string { return "recharge_retry" }

// IdempotencyKey is Stripe's Idempotency-Key for an attempt's PaymentIntent: one attempt, one payment,
// however often the job runs.
func IdempotencyKey(attemptID int64) string { return "recharge:" + strconv.FormatInt(attemptID, 10) }

// Charger creates the attempts' PaymentIntents: the work of the jobs the Sweeper enqueues.
type Charger struct {
	pool   *db.Pool
	stripe *client.API
	log    *slog.Logger
}

// NewCharger charges on pool's database, calling Stripe through sc (nil: no STRIPE_SECRET_KEY; the
// jobs then fail and are retried until one is configured).
func NewCharger(pool *db.Pool, sc *client.API, log *slog.Logger) *Charger {
	return &Charger{pool: pool, stripe: sc, log: cmp.Or(log, slog.Default())}
}

// AddWorkers registers, for the process's River client, the workers of the PaymentIntent jobs (c's
// Charge) and of the failure ladder's retries on their own queue. River's default backoff (attempt⁴
// seconds, 25 attempts) covers a Stripe outage of days.
func AddWorkers(workers *river.Workers, queues map[string]river.QueueConfig, c *Charger) {
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[Args]) error {
		return c.Charge(ctx, job.Args.AccountID, job.Args.AttemptID)
	}))
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[RetryArgs]) error {
		_, err := db.OpenRetry(ctx, c.pool, job.Args.AccountID, job.Args.Episode, job.Args.Retry)
		return err
	}))
	queues[queue] = river.QueueConfig{MaxWorkers: 4}
}

// insertOpts: one job per attempt while it exists, in any state.
var insertOpts = river.InsertOpts{Queue: queue, UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: rivertype.JobStates()}}

// Charge creates the attempt's off-session PaymentIntent (the job's work). A resolved attempt is left
// alone. A definite answer resolves the attempt at once, so that it never waits for a webhook that may
// not come: a decline (402) fails it with the card's decline code, or pauses it when the card needs its
// customer; a refused request (another 4xx, such as a card no longer there) fails it, and the failure
// ladder's next attempt, under a new key, tries again. The webhook's event of the same payment then
// finds the attempt resolved. No answer, or Stripe's own error (5xx: it may have acted), is returned for
// River to retry with the same key, which gets Stripe's first PaymentIntent back if it did.
func (c *Charger) Charge(ctx context.Context, accountID string, attemptID int64) error {
	ch, err := db.AttemptCharge(ctx, c.pool, accountID, attemptID)
	if errors.Is(err, db.ErrNotFound) {
		return river.JobCancel(err)
	}
	if err != nil {
		return err
	}
	if ch.Status != db.AttemptRequested {
		return nil
	}
	if c.stripe == nil {
		return errors.New("recharge: STRIPE_SECRET_KEY is not set; the attempt waits for it")
	}
	params := PaymentIntentParams(ch)
	params.SetIdempotencyKey(IdempotencyKey(attemptID))
	params.Context = ctx
	pi, err := c.stripe.PaymentIntents.New(params)
	var se *stripe.Error
	switch {
	case errors.As(err, &se) && se.HTTPStatusCode == http.StatusPaymentRequired:
		c.log.WarnContext(ctx, "recharge declined", "account", accountID, "attempt", attemptID, "code", string(se.Code),
			"decline_code", string(se.DeclineCode))
		status := db.AttemptFailed
		if se.Code == stripe.ErrorCodeAuthenticationRequired {
			status = db.AttemptActionRequired
		}
		var paymentIntent string
		if se.PaymentIntent != nil {
			paymentIntent = se.PaymentIntent.ID
		}
		return c.resolve(ctx, ch, status, paymentIntent, cmp.Or(string(se.Code), string(se.Type)), cmp.Or(string(se.DeclineCode), string(se.Code)))
	case errors.As(err, &se) && se.HTTPStatusCode >= http.StatusBadRequest && se.HTTPStatusCode < http.StatusInternalServerError:
		c.log.ErrorContext(ctx, "recharge refused by Stripe", "account", accountID, "attempt", attemptID, "status", se.HTTPStatusCode,
			"error", err.Error())
		return c.resolve(ctx, ch, db.AttemptFailed, "", cmp.Or(string(se.Code), string(se.Type)), "")
	case err != nil:
		return fmt.Errorf("create PaymentIntent of attempt %d: %w", attemptID, err)
	}
	return db.SetAttemptPaymentIntent(ctx, c.pool, accountID, attemptID, pi.ID)
}

// resolve fails or pauses the attempt from Stripe's answer, as its webhook event would.
func (c *Charger) resolve(ctx context.Context, ch db.Charge, status, paymentIntent, failureCode, declineCode string) error {
	attempt := db.Attempt{AccountID: ch.AccountID, ID: ch.AttemptID}
	return db.InTx(ctx, c.pool, func(tx db.Tx) error {
		_, _, err := db.ResolveAttempt(ctx, tx, attempt, status, paymentIntent, failureCode, declineCode)
		return err
	})
}

// PaymentIntentParams is the off-session PaymentIntent of an attempt (SPEC §13): confirmed at once on
// the saved card, naming the account and the order in its metadata, which is how the webhook finds
// the order to pay.
func PaymentIntentParams(ch db.Charge) *stripe.PaymentIntentParams {
	return &stripe.PaymentIntentParams{
		Amount:        stripe.Int64(ch.Amount),
		Currency:      stripe.String(ch.Currency),
		Customer:      stripe.String(ch.Customer),
		PaymentMethod: stripe.String(ch.PaymentMethod),
		Confirm:       stripe.Bool(true),
		OffSession:    stripe.Bool(true),
		Description:   stripe.String("onceledger auto-recharge"),
		Metadata: map[string]string{
			"account_id": ch.AccountID, "topup_id": ch.TopupID,
			"recharge_attempt_id": strconv.FormatInt(ch.AttemptID, 10),
		},
	}
}

// Sweeper ends the recharge statuses whose time has come and empties the outboxes into River jobs.
// Notifier may be nil (no NOTIFY_URL): alerts, attempt outcomes and status changes then stay in their
// outbox.
type Sweeper struct {
	Pool *db.Pool
	// Jobs is the process's River client, which enqueues the PaymentIntent jobs.
	Jobs     *river.Client[db.Tx]
	Notifier *notify.Notifier
	Log      *slog.Logger
	// Interval between sweeps (default 1s).
	Interval time.Duration

	stop chan struct{}
	done sync.WaitGroup
}

// Sweep takes what the outboxes hold (a batch of each) and enqueues its jobs, in one transaction:
// the jobs and the marks commit together. Rows locked by another sweeper are skipped. It returns how
// many jobs it enqueued.
func (s *Sweeper) Sweep(ctx context.Context) (int, error) {
	// First the statuses whose cooldown or budget window ended, each in its own short statement, so that
	// their changes are in the outbox this sweep empties.
	if _, err := db.EndElapsedRechargeStatuses(ctx, s.Pool); err != nil {
		return 0, err
	}
	var n int
	err := db.InTx(ctx, s.Pool, func(tx db.Tx) error {
		n = 0
		attempts, err := db.TakeAttemptJobs(ctx, tx)
		if err != nil {
			return err
		}
		retries, err := db.TakeAttemptRetries(ctx, tx)
		if err != nil {
			return err
		}
		// The attempts' PaymentIntent jobs, and the ladder's retries scheduled when they are due.
		var params []river.InsertManyParams
		for _, a := range attempts {
			params = append(params, river.InsertManyParams{Args: Args{AccountID: a.AccountID, AttemptID: a.ID}, InsertOpts: &insertOpts})
		}
		for _, r := range retries {
			opts := insertOpts
			opts.ScheduledAt = r.At
			params = append(params, river.InsertManyParams{
				Args:       RetryArgs{AccountID: r.AccountID, AttemptID: r.AttemptID, Episode: r.Episode, Retry: r.Retry},
				InsertOpts: &opts,
			})
		}
		if len(params) > 0 {
			if _, err := s.Jobs.InsertManyTx(ctx, tx, params); err != nil {
				return fmt.Errorf("enqueue %d recharge jobs: %w", len(params), err)
			}
			n += len(params)
		}
		if s.Notifier == nil {
			return nil
		}
		events, err := takeEvents(ctx, tx)
		if err != nil {
			return err
		}
		for _, a := range attempts {
			events = append(events, notify.EventArgs{
				ID: fmt.Sprintf("ntf_recharge_%d_%s", a.ID, notify.TypeRechargeRequested), Type: notify.TypeRechargeRequested,
				AccountID: a.AccountID, CreatedAt: a.CreatedAt.UTC(),
				Data: map[string]any{"attempt_id": a.ID, "amount": a.Amount, "episode": a.Episode, "retry": a.Retry},
			})
		}
		n += len(events)
		return s.Notifier.EnqueueEvents(ctx, tx, events)
	})
	return n, err
}

// takeEvents turns the alert, attempt-outcome, block and status-change outboxes into notifications.
func takeEvents(ctx context.Context, tx db.Tx) ([]notify.EventArgs, error) {
	alerts, err := db.TakeAlerts(ctx, tx)
	if err != nil {
		return nil, err
	}
	var events []notify.EventArgs
	for _, a := range alerts {
		id := fmt.Sprintf("%s_%d_%d", a.AccountID, a.Threshold, a.Episode)
		if a.LowPending {
			events = append(events, notify.EventArgs{
				ID: "ntf_low_" + id, Type: notify.TypeBalanceLow, AccountID: a.AccountID, CreatedAt: a.LowAt.UTC(),
				Data: map[string]any{"threshold": a.Threshold, "available": a.LowAvailable},
			})
		}
		if a.RecoveredPending {
			events = append(events, notify.EventArgs{
				ID: "ntf_recovered_" + id, Type: notify.TypeBalanceRecovered, AccountID: a.AccountID, CreatedAt: a.RecoveredAt.UTC(),
				Data: map[string]any{"threshold": a.Threshold, "available": *a.RecoveredAvailable},
			})
		}
	}
	attempts, err := db.TakeAttemptNotices(ctx, tx)
	if err != nil {
		return nil, err
	}
	for _, a := range attempts {
		data := map[string]any{
			"attempt_id": a.ID, "amount": a.Amount, "payment_intent": a.PaymentIntent, "code": a.FailureCode,
			"decline_code": a.DeclineCode, "retry": a.Retry, "retry_at": a.RetryAt,
		}
		event := func(typ string, data map[string]any) notify.EventArgs {
			return notify.EventArgs{
				ID: fmt.Sprintf("ntf_recharge_%d_%s", a.ID, typ), Type: typ, AccountID: a.AccountID,
				CreatedAt: a.ResolvedAt.UTC(), Data: data,
			}
		}
		switch a.Status {
		case db.AttemptSucceeded:
			events = append(events, event(notify.TypeRechargeSucceeded, data))
		case db.AttemptActionRequired:
			events = append(events, event(notify.TypeRechargeActionRequired, data))
		case db.AttemptFailed:
			events = append(events, event(notify.TypeRechargeFailed, data))
			if a.DisabledRecharge {
				disabled := maps.Clone(data)
				disabled["reason"] = db.RechargeDisabledAfterFailures
				if a.HardDecline {
					disabled["reason"] = db.RechargePaymentMethodRequired
				}
				events = append(events, event(notify.TypeRechargeDisabled, disabled))
			}
		}
	}
	blocks, err := db.TakeBlockNotices(ctx, tx)
	if err != nil {
		return nil, err
	}
	for _, b := range blocks {
		events = append(events, notify.EventArgs{
			ID: fmt.Sprintf("ntf_recharge_blocked_%s_%d_%s", b.AccountID, b.Episode, b.Reason), Type: notify.TypeRechargeBlocked,
			AccountID: b.AccountID, CreatedAt: b.BlockedAt.UTC(),
			Data: map[string]any{"episode": b.Episode, "reason": b.Reason, "next_eligible_at": b.NextEligibleAt.UTC()},
		})
	}
	reached, err := db.TakeLimitsReached(ctx, tx)
	if err != nil {
		return nil, err
	}
	for _, l := range reached {
		events = append(events, notify.EventArgs{
			ID:   fmt.Sprintf("ntf_limit_%s_%s_%d", l.AccountID, l.LimitID, l.WindowStart.Unix()),
			Type: notify.TypeLimitReached, AccountID: l.AccountID, CreatedAt: l.ReachedAt.UTC(),
			Data: map[string]any{"limit_id": l.LimitID, "window_start": l.WindowStart.UTC(), "spent": l.Spent, "held": l.Held},
		})
	}
	changes, err := db.TakeStatusChanges(ctx, tx)
	if err != nil {
		return nil, err
	}
	for _, c := range changes {
		var next any
		if c.NextEligibleAt != nil {
			next = c.NextEligibleAt.UTC()
		}
		events = append(events, notify.EventArgs{
			ID: fmt.Sprintf("ntf_recharge_status_%s_%d", c.AccountID, c.Seq), Type: notify.TypeRechargeStatusChanged,
			AccountID: c.AccountID, CreatedAt: c.ChangedAt.UTC(),
			Data: map[string]any{
				"account_id": c.AccountID, "from": c.From, "to": c.To, "reason": c.Reason, "next_eligible_at": next,
			},
		})
	}
	return events, nil
}

// Start sweeps every Interval until Stop (also right away, for what committed while stopped).
func (s *Sweeper) Start(ctx context.Context) {
	interval := cmp.Or(s.Interval, time.Second)
	log := cmp.Or(s.Log, slog.Default())
	s.stop = make(chan struct{})
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
				log.Error("sweeping recharge and alert outboxes", "error", err.Error())
			}
			select {
			case <-s.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Stop ends the sweeps and waits for the one in flight.
func (s *Sweeper) Stop() {
	close(s.stop)
	s.done.Wait()
}
