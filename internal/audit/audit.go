// Package audit records requests in the audit trail (audit_log): the API's mutating and refused
// requests and the console's actions, with the key's name, the route, the ids it named and how it
// ended. A request that commits an effect has its record written in that transaction
// (db.PendingAudit); Record writes the others, after the answer (db.AuditTrail).
package audit

import (
	"log/slog"
	"net"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/gorilla/mux"

	"github.com/onceledger/onceledger/db"
)

// Recorder writes records; the API's guard and the console share one.
type Recorder struct {
	Trail *db.AuditTrail
	Log   *slog.Logger
}

// Of is the record of r, answered with status: its action is the method and route pattern (prefixed,
// e.g. "console "), its ids the route's variables (the account of a route under /v1/accounts/, then
// the hold; else the route's one id, or period), its remote address the connection's.
func Of(r *http.Request, prefix, keyName string, status int, outcome string) db.AuditRecord {
	pattern := r.URL.Path
	if route := mux.CurrentRoute(r); route != nil {
		if p, err := route.GetPathTemplate(); err == nil {
			pattern = p
		}
	}
	rec := db.AuditRecord{KeyName: keyName, Action: prefix + r.Method + " " + pattern, Status: status, Outcome: outcome,
		RemoteAddr: RemoteHost(r)}
	vars := mux.Vars(r)
	if strings.HasPrefix(pattern, "/v1/accounts/") {
		rec.AccountID, rec.TargetID = vars["id"], vars["hold_id"]
	} else {
		rec.TargetID = vars["id"]
		if rec.TargetID == "" {
			rec.TargetID = vars["period"] // a period closed: the month
		}
	}
	rec.Action, rec.AccountID, rec.TargetID = text(rec.Action), text(rec.AccountID), text(rec.TargetID)
	return rec
}

// maxText bounds what a record keeps of a caller's text (an invalid id is recorded too).
const maxText = 256

// text is s as PostgreSQL text can hold it: valid UTF-8 without NUL (each bad byte a U+FFFD), cut to
// maxText bytes on a character boundary.
func text(s string) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	if len(s) <= maxText {
		return s
	}
	cut := maxText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// Record writes rec once committed (with the records of concurrent requests, in groups): the record of
// a request whose effect's transaction wrote none (db.PendingAudit), a refusal, a failure or a replay.
// A record that cannot be written is logged.
func (a Recorder) Record(r *http.Request, rec db.AuditRecord) {
	if a.Trail == nil {
		return // no database (the router's own tests): nothing to record into
	}
	if err := a.Trail.Record(r.Context(), rec); err != nil {
		a.Log.ErrorContext(r.Context(), "audit trail: record not written", "action", rec.Action, "key", rec.KeyName,
			"account", rec.AccountID, "target", rec.TargetID, "status", rec.Status, "err", err)
	}
}

// RemoteHost is the address the request came from, without its port.
func RemoteHost(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}
