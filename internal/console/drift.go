package console

import (
	"errors"
	"net/http"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/stripeevents"
)

// driftListed bounds the drift page: each row with a stored event runs a dry run.
const driftListed = 50

type driftPage struct {
	frame
	Drift []driftRow
	// More: there is more open drift than listed.
	More bool
}

// driftRow is one open drift and, when a stored event would repair it, what replaying that event would
// do now.
type driftRow struct {
	db.Drift
	DryRun      *stripeevents.DryRun
	DryRunError string
}

// drift lists the open drift between Stripe and the ledger, oldest first, each with the dry run of the
// parked event whose replay would repair it (the replay's own code path, rolled back), and a link to
// that event's page, where it is replayed.
func (c *Console) drift(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	open, err := db.OpenDrift(ctx, c.Pool, driftListed+1)
	if err != nil {
		return err
	}
	p := &driftPage{frame: c.frame(r, "Stripe drift"), More: len(open) > driftListed}
	for _, d := range open[:min(len(open), driftListed)] {
		row := driftRow{Drift: d}
		if d.EventID != "" {
			dry, err := c.Events.DryRun(ctx, d.EventID)
			switch {
			case err == nil:
				row.DryRun = &dry
			case errors.Is(err, stripeevents.ErrStripeUnavailable):
				row.DryRunError = "The dry run needs the Stripe API, which did not answer. Try again later."
			default:
				c.Log.ErrorContext(ctx, "console drift dry run", "event", d.EventID, "err", err)
				row.DryRunError = "The dry run failed; the server's log has the detail."
			}
		}
		p.Drift = append(p.Drift, row)
	}
	c.render(w, r, http.StatusOK, "drift", p)
	return nil
}
