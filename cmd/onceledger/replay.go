package main

import (
	"context"
	"fmt"
	"io"

	"github.com/onceledger/onceledger/internal/stripeevents"
)

// replay re-applies stored Stripe events through the webhook's own code path (parked ones after their
// cause was fixed). Every effect is keyed, so a replay can never double one. With --dry-run it applies
// them in a transaction that is rolled back and prints the entries a replay would post, changing
// nothing. It prints one line per event (and one per entry a dry run finds) and fails when any event
// could not be replayed.
func replay(ctx context.Context, e env, args []string) error {
	dryRun := len(args) > 0 && args[0] == "--dry-run"
	eventIDs := args
	if dryRun {
		eventIDs = args[1:]
	}
	if len(eventIDs) == 0 {
		return fmt.Errorf("replay needs at least one event id: %w", errUsage)
	}
	w, err := e.wire(ctx, false, nil, nil)
	if err != nil {
		return err
	}
	defer w.close()

	var failed int
	for _, id := range eventIDs {
		if dryRun {
			err = printDryRun(ctx, e.stdout, w.events, id)
		} else {
			err = printReplay(ctx, e.stdout, w.events, id)
		}
		if err != nil {
			failed++
			fmt.Fprintf(e.stdout, "%s error: %v\n", id, err)
		}
	}
	if failed > 0 {
		return fmt.Errorf("replay: %d of %d events failed", failed, len(eventIDs))
	}
	return nil
}

func printReplay(ctx context.Context, w io.Writer, p *stripeevents.Processor, eventID string) error {
	res, err := p.Replay(ctx, eventID)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, resultLine(res, ""))
	return nil
}

// printDryRun prints the replay's result, then one line per entry it would post:
// "+ ACCOUNT KIND AMOUNT KEY balance_after=N".
func printDryRun(ctx context.Context, w io.Writer, p *stripeevents.Processor, eventID string) error {
	dry, err := p.DryRun(ctx, eventID)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, resultLine(dry.Result, "dry-run "))
	if len(dry.Entries) == 0 {
		fmt.Fprintln(w, "  would post nothing")
	}
	for _, e := range dry.Entries {
		fmt.Fprintf(w, "  + %s %s %+d %s balance_after=%d\n", e.AccountID, e.Kind, e.Amount, e.DedupeKey, e.BalanceAfter)
	}
	return nil
}

func resultLine(res stripeevents.Result, prefix string) string {
	line := fmt.Sprintf("%s %s%s credited=%t reversed=%d restored=%d", res.EventID, prefix, res.Outcome, res.Credited, res.Reversed, res.Restored)
	if res.Parked != "" {
		line += " parked=" + res.Parked
	}
	return line
}
