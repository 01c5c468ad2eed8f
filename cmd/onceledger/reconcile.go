package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/onceledger/onceledger/internal/reconcile"
)

// reconcileCmd is `onceledger reconcile [--once]`: one pass, or a pass every RECONCILE_INTERVAL until
// interrupted, printing what each billed and recovered; `reconcile --stripe` runs the drift pass instead.
func reconcileCmd(ctx context.Context, e env, args []string) error {
	flags := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	flags.SetOutput(e.stderr)
	once := flags.Bool("once", false, "run one pass and exit")
	progressEvery := flags.Int("progress-every", 10, "print a progress line every N chunks of decisions")
	stripeDrift := flags.Bool("stripe", false, "check that Stripe and the ledger agree (the drift pass) and exit")
	since := flags.String("since", "", "with --stripe: the window's start (RFC 3339 or YYYY-MM-DD, UTC); default --until minus 24h")
	until := flags.String("until", "", "with --stripe: the window's end, excluded (RFC 3339 or YYYY-MM-DD, UTC); default now")
	const usage = "reconcile [--once] [--progress-every N] | reconcile --stripe [--since T] [--until T]"
	if err := flags.Parse(args); err != nil || flags.NArg() > 0 || (!*stripeDrift && (*since != "" || *until != "")) {
		return fmt.Errorf("%w: %s", errUsage, usage)
	}
	var window *[2]time.Time
	if *since != "" || *until != "" {
		w, err := driftWindow(*since, *until, time.Now())
		if err != nil {
			return fmt.Errorf("%w: %s: %v", errUsage, usage, err)
		}
		window = &w
	}
	w, err := e.wire(ctx, false, nil, nil)
	if err != nil {
		return err
	}
	defer w.close()

	if *stripeDrift {
		return checkStripe(ctx, e, w, window)
	}
	r := newReconciler(e, w, nil, reconcile.Options{
		ProgressEvery: *progressEvery,
		Progress: func(rep reconcile.BillReport) {
			fmt.Fprintf(e.stdout, "… read %d decisions up to seq %d, billed %d (%.0f decisions/s)\n",
				rep.Read, rep.LastSeq, rep.Billed, perSecond(rep))
		},
	})
	if *once {
		rep, err := r.Pass(ctx)
		printReport(e.stdout, rep)
		return err
	}
	fmt.Fprintf(e.stdout, "reconciling every %s; Ctrl-C stops\n", e.cfg.ReconcileInterval)
	r.Run(ctx, e.cfg.ReconcileInterval, func(rep reconcile.Report, err error) {
		printReport(e.stdout, rep)
		if err != nil {
			fmt.Fprintf(e.stderr, "reconcile pass failed (retried next pass): %v\n", err)
		}
	})
	return nil
}

// errDrift: the drift pass found Stripe and the ledger differing (exit status 1, as verify's).
var errDrift = errors.New("Stripe and the ledger differ: see above, and docs/operating.md (Stripe drift) to repair")

// checkStripe runs the drift pass over window, or without one over the days the scheduled pass would
// check (the complete days of the last week without a checkpoint), printing progress and what it found.
func checkStripe(ctx context.Context, e env, w *wiring, window *[2]time.Time) error {
	r := newReconciler(e, w, nil, reconcile.Options{
		DriftProgress: func(rep reconcile.DriftReport) {
			fmt.Fprintf(e.stdout, "… %s: listed %d Stripe objects, matched %d of %d objects of this deployment\n",
				windowText(rep), rep.Listed, rep.Matched, rep.Payments+rep.Refunds+rep.Disputes)
		},
	})
	var (
		reps []reconcile.DriftReport
		err  error
	)
	if window != nil {
		var rep reconcile.DriftReport
		rep, err = r.CheckStripe(ctx, window[0], window[1])
		reps = []reconcile.DriftReport{rep}
	} else {
		reps, err = r.CheckStripeDays(ctx, time.Now())
		if err == nil && len(reps) == 0 {
			fmt.Fprintln(e.stdout, "every complete day of the last week has its checkpoint: nothing to check")
		}
	}
	found := false
	for _, rep := range reps {
		printDriftReport(e.stdout, rep)
		found = found || len(rep.Found) > 0
	}
	if err != nil {
		return fmt.Errorf("the drift pass failed and recorded nothing for its window: %w", err)
	}
	if found {
		return errDrift
	}
	return nil
}

// driftWindow reads --since and --until: RFC 3339 times or UTC dates; an unset end is now, an unset
// start the end minus a day.
func driftWindow(since, until string, now time.Time) ([2]time.Time, error) {
	var w [2]time.Time
	var err error
	if w[1], err = timeFlag("--until", until, now); err != nil {
		return w, err
	}
	if w[0], err = timeFlag("--since", since, w[1].Add(-24*time.Hour)); err != nil {
		return w, err
	}
	if !w[1].After(w[0]) {
		return w, errors.New("--until must be after --since")
	}
	return w, nil
}

func timeFlag(name, value string, unset time.Time) (time.Time, error) {
	if value == "" {
		return unset, nil
	}
	if t, err := time.Parse(time.RFC3339, value); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, value); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%s must be an RFC 3339 time or a YYYY-MM-DD date, got %q", name, value)
}

func windowText(rep reconcile.DriftReport) string {
	return rep.Since.UTC().Format(time.RFC3339) + " to " + rep.Until.UTC().Format(time.RFC3339)
}

func printDriftReport(w io.Writer, rep reconcile.DriftReport) {
	if rep.Skipped != "" {
		fmt.Fprintf(w, "Stripe drift: not checked (%s)\n", rep.Skipped)
		return
	}
	fmt.Fprintf(w, "Stripe drift %s: listed %d objects (%d of another deployment or moving no money, %d more fetched by id); "+
		"checked %d payments, %d refunds, %d disputes and %d credits; matched %d objects and %d credits; %d drift found, %d resolved\n",
		windowText(rep), rep.Listed, rep.Others, rep.Retrieved, rep.Payments, rep.Refunds, rep.Disputes, rep.Credits,
		rep.Matched, rep.CreditsMatched, len(rep.Found), rep.Resolved)
	for _, d := range rep.Found {
		account := d.AccountID
		if account == "" {
			account = "(no account)"
		}
		fmt.Fprintf(w, "  %s %s on %s: %s", d.Reason, d.ObjectID, account, d.Detail)
		if d.EventID != "" {
			fmt.Fprintf(w, " (replay %s repairs it)", d.EventID)
		}
		fmt.Fprintln(w)
	}
	if c := rep.Checkpoint; c != nil {
		fmt.Fprintf(w, "  clean: checkpoint of %d objects and %d credits, digest %s\n", c.Objects, c.Credits, c.Digest)
	}
}

// startReconciler runs the reconciler every RECONCILE_INTERVAL in serve's background. The returned
// stop cancels it and waits for the pass in flight, so that it ends before the pool closes.
func startReconciler(ctx context.Context, e env, w *wiring, m *reconcile.Metrics) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	r := newReconciler(e, w, m, reconcile.Options{})
	go func() {
		defer close(done)
		r.Run(ctx, e.cfg.ReconcileInterval, func(rep reconcile.Report, err error) { logReport(e.log, rep, err) })
	}()
	return func() {
		cancel()
		<-done
	}
}

// startStripeDrift runs the drift pass every STRIPE_RECONCILE_INTERVAL in serve's background (unless 0,
// or without a Stripe key), beside the reconciler and never in the webhook's way: a Stripe outage delays
// the report, logged once per run. The returned stop cancels it and waits for the run in flight.
func startStripeDrift(ctx context.Context, e env, w *wiring, m *reconcile.Metrics) (stop func()) {
	switch {
	case e.cfg.StripeReconcileInterval == 0:
		e.log.Info("Stripe drift pass off (STRIPE_RECONCILE_INTERVAL=0)")
		return func() {}
	case w.stripe == nil:
		e.log.Info("Stripe drift pass off: STRIPE_SECRET_KEY not set")
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	r := newReconciler(e, w, m, reconcile.Options{
		DriftProgress: func(rep reconcile.DriftReport) {
			e.log.Info("Stripe drift pass", "since", rep.Since, "until", rep.Until, "listed", rep.Listed, "matched", rep.Matched)
		},
	})
	go func() {
		defer close(done)
		r.RunStripeDrift(ctx, e.cfg.StripeReconcileInterval, func(reps []reconcile.DriftReport, err error) {
			for _, rep := range reps {
				e.log.Info("Stripe drift checked", "since", rep.Since, "until", rep.Until, "listed", rep.Listed,
					"matched", rep.Matched, "credits_matched", rep.CreditsMatched, "drift", len(rep.Found), "resolved", rep.Resolved,
					"clean", rep.Checkpoint != nil)
			}
			if err != nil {
				e.log.Error("Stripe drift pass failed; retried next run (credits are not delayed)", "err", err)
			}
		})
	}()
	return func() {
		cancel()
		<-done
	}
}

// newReconciler hands the reconciler what w built: billing posts through its ledger, and missed
// events go through the webhook's own processor, so a recovered event is applied exactly as its
// delivery would have been.
func newReconciler(e env, w *wiring, m *reconcile.Metrics, opts reconcile.Options) *reconcile.Reconciler {
	opts.Lookback = e.cfg.ReconcileLookback
	return reconcile.New(reconcile.Deps{
		Pool: w.pool, Ledger: w.ledger, Stripe: w.stripe, Events: w.events, Livemode: e.cfg.Livemode, Metrics: m,
	}, opts)
}

func perSecond(rep reconcile.BillReport) float64 {
	if rep.Elapsed <= 0 {
		return 0
	}
	return float64(rep.Read) / rep.Elapsed.Seconds()
}

func printReport(w io.Writer, rep reconcile.Report) {
	b := rep.Bill
	kind := "incremental"
	if rep.Full {
		kind = "full"
	}
	fmt.Fprintf(w, "billed %d decisions (%d minor units) in a %s pass: read %d in %d chunks, seq %d to %d, %s (%.0f decisions/s)\n",
		b.Billed, b.Amount, kind, b.Read, b.Chunks, b.FromSeq, b.LastSeq, b.Elapsed.Round(time.Millisecond), perSecond(b))
	if b.OutOfRange > 0 {
		fmt.Fprintf(w, "out of range: %d decisions cannot be billed without taking their account's balance beyond a bigint (left unbilled, the others billed): %s\n",
			b.OutOfRange, strings.Join(b.OutOfRangeAccounts, ", "))
	}
	if b.Waiting > 0 {
		fmt.Fprintf(w, "waiting: %d decisions name accounts that do not exist yet (billed once they do): %s\n",
			b.Waiting, strings.Join(b.WaitingAccounts, ", "))
	}
	if b.HoldsCaptured > 0 || rep.Expired.Holds > 0 {
		fmt.Fprintf(w, "holds: %d captured by their decisions (%d costing more than the hold), %d expired releasing %d on %d accounts\n",
			b.HoldsCaptured, b.CostsAboveHold, rep.Expired.Holds, rep.Expired.Released, rep.Expired.Accounts)
	}
	rec := rep.Recovery
	if rec.Skipped != "" {
		fmt.Fprintf(w, "missed Stripe events: not checked (%s)\n", rec.Skipped)
		return
	}
	fmt.Fprintf(w, "recovered %d missed Stripe events: %d listed since %s, %d already processed, %d failed\n",
		rec.Applied, rec.Listed, rec.Since.UTC().Format("2006-01-02 15:04:05Z"), rec.Duplicates, rec.Failed)
}

// logReport logs a background pass: quietly when it found nothing to do.
func logReport(log *slog.Logger, rep reconcile.Report, err error) {
	b, rec := rep.Bill, rep.Recovery
	attrs := []any{"full", rep.Full, "read", b.Read, "billed", b.Billed, "amount", b.Amount, "waiting", b.Waiting, "out_of_range", b.OutOfRange,
		"holds_captured", b.HoldsCaptured, "costs_above_hold", b.CostsAboveHold, "holds_expired", rep.Expired.Holds,
		"events_listed", rec.Listed, "events_applied", rec.Applied, "events_failed", rec.Failed}
	switch {
	case err != nil:
		log.Error("reconcile pass failed; retried next pass", append(attrs, "err", err)...)
	case b.Billed > 0 || b.Waiting > 0 || rec.Applied > 0 || rep.Expired.Holds > 0:
		log.Info("reconciled", attrs...)
	default:
		log.Debug("reconciled", attrs...)
	}
}
