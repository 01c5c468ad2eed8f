package api

import (
	"net/http"

	"github.com/onceledger/onceledger/internal/console"
)

// handleConsole serves the operator console (package console) under /console: HTML for people,
// outside the JSON API and its document. Logging in takes one of the API keys, checked as the
// bearer check does.
func handleConsole(d Deps) http.Handler {
	return console.New(console.Deps{
		Pool:     d.Pool,
		Events:   d.Events,
		Log:      d.Log,
		CheckKey: newAPIKeys(d.Config.APIKeys).match,
	})
}
