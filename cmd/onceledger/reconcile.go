package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/onceledger/onceledger/internal/reconcile"
)

// reconcileCmd is `onceledger reconcile [--once]`: one pass, or a pass every RECONCILE_INTERVAL until
// interrupted, printing what each billed and recovered.
func reconcileCmd(ctx context.Context, e env, args []string) error {
	flags := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	flags.SetOutput(e.stderr)
	once := flags.Bool("once", false, "run one pass and exit")
	progressEvery := flags.Int("progress-every", 10, "print a progress line every N chunks of decisions")
	if err := flags.Parse(args); err != nil || flags.NArg() > 0 {
		return fmt.Errorf("%w: reconcile [--once] [--progress-every N]", errUsage)
	}
	w, err := e.wire(ctx, false, nil)
	if err != nil {
		return err
	}
	defer w.close()

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

// newReconciler hands the reconciler what w built: billing posts through its ledger, and missed
// events go through the webhook's own processor, so a recovered event is applied exactly as its
// delivery would have been.
func newReconciler(e env, w *wiring, m *reconcile.Metrics, opts reconcile.Options) *reconcile.Reconciler {
	opts.Lookback = e.cfg.ReconcileLookback
	return reconcile.New(reconcile.Deps{Pool: w.pool, Ledger: w.ledger, Stripe: w.stripe, Events: w.events, Metrics: m}, opts)
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
