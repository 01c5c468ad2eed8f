// Package notify tells a receiver about every newly posted ledger entry, after the entry commits and
// never twice for one entry, and about account events (low balance, recharge outcomes; EventArgs).
//
// Enqueue, used as db.Ledger.OnPosted, inserts one River job per entry in the posting transaction:
// the job commits or rolls back with the entry, and a replay, which posts nothing, enqueues nothing.
// The job is unique per entry. A worker then POSTs it to NOTIFY_URL, signed (Sign), with the same
// Idempotency-Key on every attempt, retrying with exponential backoff until the receiver answers 2xx
// or the attempts run out; the job then stays in river_job as discarded, for operators to see. The
// jobs go through the process's one River client: AddWorkers registers the delivery workers with it,
// NewNotifier enqueues through it.
package notify

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/onceledger/onceledger/db"
)

// EventType is the "type" of every notification.
const EventType = "entry.posted"

// queue is River's queue for notification jobs.
const queue = "notifications"

// Defaults for the zero values of Config.
const (
	defaultMaxAttempts = 10
	defaultRetryBase   = 30 * time.Second
	defaultTimeout     = 10 * time.Second
	defaultWorkers     = 10
	// maxRetryWait caps the backoff, so a large attempt count never waits for days.
	maxRetryWait = 6 * time.Hour
)

// DiscardedRetention is how long the process's River client keeps given-up jobs, so that operators
// see given-up notifications (the console's overview) and can retry them; River's default is a week.
const DiscardedRetention = 30 * 24 * time.Hour

// Args is one notification job: everything the receiver gets, fixed when the entry is posted so
// that every attempt sends the same body. ID alone makes the job unique.
type Args struct {
	ID        string    `json:"id" river:"unique"`
	AccountID string    `json:"account_id"`
	EntryKind string    `json:"kind"`
	Amount    int64     `json:"amount"`
	Balance   int64     `json:"balance"`
	CreatedAt time.Time `json:"created_at"`
}

// Kind names the job in river_job.kind.
func (Args) Kind() string { return "entry_posted_notification" }

// NotificationID is the notification's id and Idempotency-Key for an entry: stable, one per entry.
func NotificationID(entryID int64) string { return "ntf_" + strconv.FormatInt(entryID, 10) }

// Notification is the JSON body a receiver gets.
type Notification struct {
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	AccountID string    `json:"account_id"`
	Kind      string    `json:"kind"`
	Amount    int64     `json:"amount"`
	Balance   int64     `json:"balance"`
	CreatedAt time.Time `json:"created_at"`
}

// Config says where and how notifications go. Zero values take the defaults noted.
type Config struct {
	// URL receives every notification (NOTIFY_URL).
	URL string
	// Secret signs every notification (NOTIFY_SECRET).
	Secret string
	// Log receives the workers' logs; nil logs nothing.
	Log *slog.Logger
	// MaxAttempts bounds the deliveries of one notification (default 10).
	MaxAttempts int
	// RetryBase is the wait after the first failure; each further failure doubles it (default 30s,
	// so ten attempts span about four hours).
	RetryBase time.Duration
	// Timeout bounds one delivery; running out counts as a failure (default 10s).
	Timeout time.Duration
	// Workers is how many deliveries run at once (default 10).
	Workers int
}

// AddWorkers registers, for the process's River client, the workers that deliver notifications
// (entries and account events) on their own queue; the client works them once started.
func AddWorkers(workers *river.Workers, queues map[string]river.QueueConfig, cfg Config) error {
	if cfg.URL == "" || cfg.Secret == "" {
		return errors.New("notify: a URL and a secret are required")
	}
	w := &worker{
		url: cfg.URL, secret: cfg.Secret, log: cfg.Log, http: &http.Client{},
		retryBase: cmp.Or(cfg.RetryBase, defaultRetryBase), timeout: cmp.Or(cfg.Timeout, defaultTimeout), now: time.Now,
	}
	river.AddWorker(workers, w)
	river.AddWorker(workers, &eventWorker{w: w})
	queues[queue] = river.QueueConfig{MaxWorkers: cmp.Or(cfg.Workers, defaultWorkers)}
	return nil
}

// Notifier enqueues notifications through the process's River client.
type Notifier struct {
	jobs       *river.Client[db.Tx]
	insertOpts river.InsertOpts
}

// NewNotifier enqueues through jobs, the process's River client; the workers AddWorkers registered
// with it deliver what it enqueues.
func NewNotifier(jobs *river.Client[db.Tx], cfg Config) *Notifier {
	return &Notifier{
		jobs: jobs,
		insertOpts: river.InsertOpts{
			Queue:       queue,
			MaxAttempts: cmp.Or(cfg.MaxAttempts, defaultMaxAttempts),
			// Unique per notification id while its job exists in any state, delivered or given up.
			UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: rivertype.JobStates()},
		},
	}
}

// Enqueue inserts, in tx, one notification job per newly posted entry; it is made for
// db.Ledger.OnPosted. The jobs commit or roll back with the entries; an entry that already has a
// job gets no second one.
func (n *Notifier) Enqueue(ctx context.Context, tx db.Tx, entries []db.Entry) error {
	params := make([]river.InsertManyParams, 0, len(entries))
	// River rejects a batch holding one unique job twice; an entry listed twice is still one notification.
	listed := make(map[int64]bool, len(entries))
	for _, e := range entries {
		if listed[e.ID] {
			continue
		}
		listed[e.ID] = true
		params = append(params, river.InsertManyParams{
			Args: Args{
				ID: NotificationID(e.ID), AccountID: e.AccountID, EntryKind: e.Kind, Amount: e.Amount,
				Balance: e.BalanceAfter, CreatedAt: e.CreatedAt.UTC(),
			},
			InsertOpts: &n.insertOpts,
		})
	}
	if _, err := n.jobs.InsertManyTx(ctx, tx, params); err != nil {
		return fmt.Errorf("enqueue %d notifications: %w", len(params), err)
	}
	return nil
}

// worker delivers one notification per job.
type worker struct {
	river.WorkerDefaults[Args]
	url, secret string
	log         *slog.Logger
	http        *http.Client
	retryBase   time.Duration
	timeout     time.Duration
	now         func() time.Time
}

// Work POSTs the notification once. Any error, a non-2xx answer or a timeout, makes River retry it.
func (w *worker) Work(ctx context.Context, job *river.Job[Args]) error {
	a := job.Args
	body, err := json.Marshal(Notification{
		ID: a.ID, Type: EventType, AccountID: a.AccountID, Kind: a.EntryKind, Amount: a.Amount,
		Balance: a.Balance, CreatedAt: a.CreatedAt,
	})
	if err != nil {
		return err
	}
	err = w.deliver(ctx, a.ID, body)
	if err != nil && job.Attempt >= job.MaxAttempts && w.log != nil {
		w.log.Error("notification given up; it stays in river_job as discarded",
			"notification", a.ID, "attempts", job.Attempt, "error", err.Error())
	}
	return err
}

func (w *worker) deliver(ctx context.Context, id string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", id)
	req.Header.Set(SignatureHeader, Sign(w.secret, w.now(), body))
	resp, err := w.http.Do(req)
	if err != nil {
		return fmt.Errorf("deliver %s: %w", id, err)
	}
	defer resp.Body.Close()
	// Drained so the connection is reused; a receiver's answer body is never needed.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("deliver %s: receiver answered %s", id, resp.Status)
	}
	return nil
}

// NextRetry schedules the next attempt after a failure; job.Errors holds the failures before it.
func (w *worker) NextRetry(job *river.Job[Args]) time.Time {
	return w.now().Add(retryWait(w.retryBase, len(job.Errors)+1))
}

// retryWait is base after the first failure, doubled after each further one, at most maxRetryWait.
func retryWait(base time.Duration, failures int) time.Duration {
	wait := base
	for i := 1; i < failures && wait < maxRetryWait; i++ {
		wait *= 2
	}
	return min(wait, maxRetryWait)
}

// Timeout bounds one delivery; the request is made with the job's context.
func (w *worker) Timeout(*river.Job[Args]) time.Duration { return w.timeout }

// Account events (SPEC §13, §17): told to the same receiver, signed the same way, each with its own
// notification id as Idempotency-Key.
const (
	TypeBalanceLow             = "balance.low"
	TypeBalanceRecovered       = "balance.recovered"
	TypeRechargeRequested      = "recharge.requested"
	TypeRechargeSucceeded      = "recharge.succeeded"
	TypeRechargeFailed         = "recharge.failed"
	TypeRechargeDisabled       = "recharge.disabled"
	TypeRechargeActionRequired = "recharge.action_required"
	TypeRechargeBlocked        = "recharge.blocked"
	TypeRechargeStatusChanged  = "recharge.status_changed"
	// TypeLimitReached: a soft spend limit's window reached its cap (SPEC §16), once per window.
	TypeLimitReached = "limit.reached"
)

// EventArgs is one account event notification job, fixed when its row is swept from the outbox, so
// that every attempt sends the same body. ID alone makes the job unique.
type EventArgs struct {
	ID        string         `json:"id" river:"unique"`
	Type      string         `json:"type"`
	AccountID string         `json:"account_id"`
	Data      map[string]any `json:"data"`
	CreatedAt time.Time      `json:"created_at"`
}

// Kind names the job in river_job.kind.
func (EventArgs) Kind() string { return "account_event_notification" }

// EnqueueEvents inserts, in tx, one job per event; an event whose id already has a job gets no second.
func (n *Notifier) EnqueueEvents(ctx context.Context, tx db.Tx, events []EventArgs) error {
	if len(events) == 0 {
		return nil
	}
	params := make([]river.InsertManyParams, len(events))
	for i, e := range events {
		params[i] = river.InsertManyParams{Args: e, InsertOpts: &n.insertOpts}
	}
	if _, err := n.jobs.InsertManyTx(ctx, tx, params); err != nil {
		return fmt.Errorf("enqueue %d event notifications: %w", len(params), err)
	}
	return nil
}

// eventWorker delivers one account event per job, as worker does entries.
type eventWorker struct {
	river.WorkerDefaults[EventArgs]
	w *worker
}

// Work POSTs the event once; the body is the job's args, its id the Idempotency-Key.
func (e *eventWorker) Work(ctx context.Context, job *river.Job[EventArgs]) error {
	body, err := json.Marshal(job.Args)
	if err != nil {
		return err
	}
	err = e.w.deliver(ctx, job.Args.ID, body)
	if err != nil && job.Attempt >= job.MaxAttempts && e.w.log != nil {
		e.w.log.Error("notification given up; it stays in river_job as discarded",
			"notification", job.Args.ID, "attempts", job.Attempt, "error", err.Error())
	}
	return err
}

// NextRetry and Timeout are the entry worker's.
func (e *eventWorker) NextRetry(job *river.Job[EventArgs]) time.Time {
	return e.w.now().Add(retryWait(e.w.retryBase, len(job.Errors)+1))
}

func (e *eventWorker) Timeout(*river.Job[EventArgs]) time.Duration { return e.w.timeout }
