package main

import (
	"context"
	"fmt"

	"github.com/onceledger/onceledger/db"
)

// review records that an operator looked at parked events, so that verify stops reporting them as
// left unreviewed. They stay parked, and keep their money untouched, until a replay applies them. It
// prints one line per event and fails when any id is not a parked event.
func review(ctx context.Context, e env, eventIDs []string) error {
	if len(eventIDs) == 0 {
		return fmt.Errorf("review needs at least one event id: %w", errUsage)
	}
	pool, err := e.openPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()

	var failed int
	for _, id := range eventIDs {
		reviewed, err := db.MarkReviewed(ctx, pool, id)
		switch {
		case err != nil:
			failed++
			fmt.Fprintf(e.stdout, "%s error: %v\n", id, err)
		case !reviewed:
			failed++
			fmt.Fprintf(e.stdout, "%s is not a parked event\n", id)
		default:
			fmt.Fprintf(e.stdout, "%s reviewed\n", id)
		}
	}
	if failed > 0 {
		return fmt.Errorf("review: %d of %d events are not parked events", failed, len(eventIDs))
	}
	return nil
}
