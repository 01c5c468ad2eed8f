package api

import (
	"github.com/onceledger/onceledger/internal/audit"
	"github.com/onceledger/onceledger/internal/console"
)

// newConsole builds the operator console (package console), whose pages routes.go lists: HTML for
// people, outside the JSON API and its document. Logging in takes an API key with the operate scope,
// checked as the bearer check does.
func newConsole(d Deps, trail audit.Recorder) *console.Console {
	return console.New(console.Deps{
		Pool:     d.Pool,
		Jobs:     d.Jobs,
		Events:   d.Events,
		Log:      d.Log,
		Keys:     d.Config.APIKeys,
		Trail:    trail,
		Throttle: d.Throttle,
		Secure:   d.Config.SecureCookies,
	})
}
