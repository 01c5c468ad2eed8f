package main

import (
	"context"
	"fmt"
)

// replay re-applies stored Stripe events through the webhook's own code path (parked ones after their
// cause was fixed). Every effect is keyed, so a replay can never double one. It prints one line per
// event and fails when any event could not be replayed.
func replay(ctx context.Context, e env, eventIDs []string) error {
	if len(eventIDs) == 0 {
		return fmt.Errorf("replay needs at least one event id: %w", errUsage)
	}
	w, err := e.wire(ctx, false, nil)
	if err != nil {
		return err
	}
	defer w.close()

	var failed int
	for _, id := range eventIDs {
		res, err := w.events.Replay(ctx, id)
		if err != nil {
			failed++
			fmt.Fprintf(e.stdout, "%s error: %v\n", id, err)
			continue
		}
		line := fmt.Sprintf("%s %s credited=%t reversed=%d restored=%d", res.EventID, res.Outcome, res.Credited, res.Reversed, res.Restored)
		if res.Parked != "" {
			line += " parked=" + res.Parked
		}
		fmt.Fprintln(e.stdout, line)
	}
	if failed > 0 {
		return fmt.Errorf("replay: %d of %d events failed", failed, len(eventIDs))
	}
	return nil
}
