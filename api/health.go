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
func handleReadyz(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := db.CheckSchema(ctx, d.Pool); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: errorInfo{Code: "not_ready", Message: err.Error()}})
			return
		}
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
}
