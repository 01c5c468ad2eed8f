package main

import (
	"context"
	"fmt"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbsqlc"
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

	q := dbsqlc.New(pool)
	var failed int
	for _, id := range eventIDs {
		n, err := q.StripeEventMarkReviewed(ctx, id)
		switch {
		case err != nil:
			failed++
			fmt.Fprintf(e.stdout, "%s error: %v\n", id, db.MapError(err))
		case n == 0:
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
