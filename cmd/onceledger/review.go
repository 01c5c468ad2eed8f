package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/onceledger/onceledger/db"
)

// review is `review --by NAME EVENT_ID...`: it records that the operator NAME looked at parked events,
// so that verify stops reporting them as left unreviewed and names NAME instead; each review is in the
// audit trail, written in its transaction. The events stay parked, and keep their money untouched,
// until a replay applies them. It prints one line per event and fails when any id is not a parked event.
func review(ctx context.Context, e env, args []string) error {
	flags := flag.NewFlagSet("review", flag.ContinueOnError)
	flags.SetOutput(e.stderr)
	by := flags.String("by", "", "who reviewed (verify names them)")
	if err := flags.Parse(args); err != nil || *by == "" || flags.NArg() == 0 {
		return fmt.Errorf("review --by NAME needs at least one event id: %w", errUsage)
	}
	eventIDs := flags.Args()
	pool, err := e.openPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()

	var failed int
	for _, id := range eventIDs {
		var reviewed bool
		err := db.InTx(ctx, pool, func(tx db.Tx) (err error) {
			if reviewed, err = db.MarkReviewed(ctx, tx, id, *by); err != nil || !reviewed {
				return err
			}
			return db.RecordAudit(ctx, tx, db.AuditRecord{KeyName: *by, Action: "cli review", TargetID: id,
				Status: 200, Outcome: "ok"})
		})
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
