package api

import (
	"context"
	"net/http"
	"time"

	"github.com/onceledger/onceledger/db"
)

// handleHealthz answers while the process is alive; it touches nothing.
func handleHealthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
}

// handleReadyz answers 200 only when the database answers and its schema is exactly this binary's.
// The route is open, so the answer is fixed: why it is not ready (which names the database's user,
// name and address) goes to the log.
func handleReadyz(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := db.CheckSchema(ctx, d.Pool); err != nil {
			d.Log.WarnContext(r.Context(), "not ready", "err", err)
			writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: errorInfo{Code: "not_ready",
				Message: "the database is unreachable or its schema is not this version's"}})
			return
		}
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
}
