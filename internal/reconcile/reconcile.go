// Package reconcile is the reconciler (SPEC §6): it bills stored decisions as usage entries, set-based
// and exactly once, and recovers Stripe events whose webhook never arrived. Its drift pass (SPEC §20,
// stripedrift.go) checks that Stripe and the ledger agree.
//
// No job keeps state that correctness depends on. A decision is billed once because its entry's
// dedupe key decision:{id} is unique in the ledger (ledger_dedupe_idx); an event is applied once
// because its id is the primary key of stripe_events. The reconciler may therefore re-read anything,
// run in several processes at once, and crash at any point.
package reconcile

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/stripe/stripe-go/v79/client"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/stripeevents"
)

// Deps are what the reconciler works with.
type Deps struct {
	Pool *db.Pool
	// Ledger's OnPosted hook receives every usage entry billing inserts, in the chunk's transaction.
	Ledger *db.Ledger
	// Stripe and Events enable missed-event recovery; with either nil, recovery is skipped. Events is
	// the webhook's own processor, so a recovered event is applied exactly as its delivery would be.
	Stripe *client.API
	Events *stripeevents.Processor
	// Livemode is the deployment's Stripe mode (config.Config.Livemode): the drift pass leaves objects of
	// the other mode out. Nil checks both.
	Livemode *bool
	// Metrics may be nil: the counts are then not exported.
	Metrics *Metrics
}

// Options tune the reconciler; the zero value of each field means its default.
type Options struct {
	// ChunkSize is the number of decisions billed per transaction (default 10,000).
	ChunkSize int
	// Lookback is how far back recovery lists missed events (default 72h; Stripe keeps 30 days).
	Lookback time.Duration
	// RescanMargin is how many seq values below its cursor an incremental pass starts (default
	// 100,000), to catch decisions whose seq was taken early but committed late. See Pass.
	RescanMargin int64
	// FullPassEvery is how often a pass starts from seq 0 whatever the cursor says (default 1h).
	FullPassEvery time.Duration
	// Progress, when set, receives the running report every ProgressEvery chunks (default 10).
	Progress      func(BillReport)
	ProgressEvery int
	// DriftProgress, when set, receives a drift pass's running report every thousand objects listed,
	// and once when everything is matched, before it is recorded.
	DriftProgress func(DriftReport)
}

// Reconciler bills decisions and recovers missed events. Its methods are safe for concurrent use,
// and any number of reconcilers may share a database.
type Reconciler struct {
	pool          *db.Pool
	ledger        *db.Ledger
	stripe        *client.API
	events        *stripeevents.Processor
	livemode      *bool
	metrics       *Metrics
	chunkSize     int
	lookback      time.Duration
	rescanMargin  int64
	fullPassEvery time.Duration
	progress      func(BillReport)
	progressEvery int
	onDrift       func(DriftReport)

	mu       sync.Mutex
	cursor   int64     // every decision with seq ≤ cursor was billed by an earlier pass, late commits aside
	lastFull time.Time // when the last full pass started; zero: none yet
}

// New returns a reconciler.
func New(deps Deps, opts Options) *Reconciler {
	r := &Reconciler{
		pool: deps.Pool, ledger: deps.Ledger, stripe: deps.Stripe, events: deps.Events, livemode: deps.Livemode,
		metrics: deps.Metrics, chunkSize: opts.ChunkSize, lookback: opts.Lookback, rescanMargin: opts.RescanMargin,
		fullPassEvery: opts.FullPassEvery, progress: opts.Progress, progressEvery: opts.ProgressEvery,
		onDrift: opts.DriftProgress,
	}
	if r.metrics == nil {
		r.metrics = NewMetrics(nil)
	}
	if r.chunkSize <= 0 {
		r.chunkSize = 10_000
	}
	if r.lookback <= 0 {
		r.lookback = 72 * time.Hour
	}
	if r.rescanMargin <= 0 {
		r.rescanMargin = 100_000
	}
	if r.fullPassEvery <= 0 {
		r.fullPassEvery = time.Hour
	}
	if r.progressEvery <= 0 {
		r.progressEvery = 10
	}
	return r
}

// Report is what one pass did.
type Report struct {
	// Full is true when billing started from seq 0.
	Full    bool
	Bill    BillReport
	Expired db.HoldsExpired
	// LotsExpired are the expiry entries the pass posted.
	LotsExpired int
	Recovery    RecoveryReport
}

// Pass bills what is unbilled, then expires the holds whose time is up (after billing, so that a
// decision reported while its hold was live captures it first) and the credit lots whose time is up,
// and recovers missed events; each runs even when another fails.
//
// Billing starts from a cursor kept in memory, as an optimisation only. Decision seq values are
// taken at insert time but become visible at commit, so a decision can appear below a cursor that
// already passed its seq. Two things catch it: each incremental pass starts RescanMargin seq values
// below the cursor, and every FullPassEvery (and the first pass of every process) starts from 0.
// The cursor never passes a decision still waiting for its account, so that one is re-read each pass
// until its account exists. A wrong cursor costs re-reading, never money: re-reading posts nothing.
func (r *Reconciler) Pass(ctx context.Context) (Report, error) {
	started := time.Now()
	from, full := r.passStart(started)
	rep := Report{Full: full}
	var billErr, expireErr, recoverErr error
	rep.Bill, billErr = r.Bill(ctx, from)
	if billErr == nil {
		r.advance(rep.Bill, full, started)
	}
	rep.Expired, expireErr = db.ExpireHolds(ctx, r.pool)
	r.metrics.ExpiredHolds.Add(float64(rep.Expired.Holds))
	var lotsErr error
	rep.LotsExpired, lotsErr = r.ExpireLots(ctx)
	rep.Recovery, recoverErr = r.Recover(ctx)
	return rep, errors.Join(billErr, expireErr, lotsErr, recoverErr)
}

// expireLotAccounts bounds one expiry transaction: the accounts it locks.
const expireLotAccounts = 1000

// ExpireLots posts the expiry entries of every open lot past its expiry, set-based, a transaction per
// expireLotAccounts accounts (the ledger's OnPosted runs with them, as for billing).
func (r *Reconciler) ExpireLots(ctx context.Context) (int, error) {
	var n int
	for {
		posted, more, err := r.ledger.ExpireLots(ctx, expireLotAccounts)
		n += len(posted)
		if err != nil || !more {
			return n, err
		}
	}
}

func (r *Reconciler) passStart(now time.Time) (fromSeq int64, full bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lastFull.IsZero() || now.Sub(r.lastFull) >= r.fullPassEvery {
		return 0, true
	}
	return max(0, r.cursor-r.rescanMargin), false
}

func (r *Reconciler) advance(rep BillReport, full bool, started time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.metrics.LastBilled.Set(float64(started.UnixNano()) / 1e9)
	r.metrics.Waiting.Set(float64(rep.Waiting))
	r.metrics.OutOfRange.Set(float64(rep.OutOfRange))
	r.cursor = rep.LastSeq
	if rep.firstWaitingSeq != 0 {
		r.cursor = min(r.cursor, rep.firstWaitingSeq-1)
	}
	if full {
		r.lastFull = started
	}
}

// Run runs a pass now and then every interval until ctx is cancelled, handing each outcome to onPass.
// A failed pass is reported and retried at the next tick: nothing it did half-way can be doubled.
func (r *Reconciler) Run(ctx context.Context, interval time.Duration, onPass func(Report, error)) {
	every(ctx, interval, func() {
		rep, err := r.Pass(ctx)
		if ctx.Err() == nil {
			onPass(rep, err)
		}
	})
}

// every runs fn now and then every interval until ctx is cancelled.
func every(ctx context.Context, interval time.Duration, fn func()) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		fn()
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}
