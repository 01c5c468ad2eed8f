package api

import (
	"net/http"

	"github.com/onceledger/onceledger/console"
	"github.com/onceledger/onceledger/stripeapi"
	"github.com/onceledger/onceledger/stripeevents"
)

// handleConsole serves the operator console (package console) under /console: HTML for people,
// outside the JSON API and its document. Logging in takes one of the API keys, checked as the
// bearer check does.
func handleConsole(d Deps) http.Handler {
	return console.New(console.Deps{
		Pool:     d.Pool,
		Events:   &stripeevents.Processor{Pool: d.Pool, Ledger: d.Ledger, Stripe: stripeapi.New(d.Config), Log: d.Log},
		Log:      d.Log,
		CheckKey: newAPIKeys(d.Config.APIKeys).match,
	})
}
