package api

import (
	"encoding/json"
	"net/http"

	"github.com/onceledger/onceledger/db"
)

// answersOnEffect says, before the operation that commits r's effect runs, the status r answers when
// it does (a creation's 201), for the record that commits with the effect (db.PendingAudit).
func answersOnEffect(r *http.Request, status int) {
	db.PendingAuditOf(r.Context()).AnswersOnEffect(status)
}

// outcomeWriter remembers the status of the answer and, for an error, its code, for the audit trail
// (package audit): for the record of a request whose effect's transaction wrote none (a refusal, a
// failure, a replay), written after the handler, before the answer leaves the server's buffer
// (docs/access.md).
type outcomeWriter struct {
	http.ResponseWriter
	status int
	code   string
}

func (w *outcomeWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

// Write reads the code of an error answer: writeJSON writes each body in one Write.
func (w *outcomeWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.status >= 400 && w.code == "" {
		var body errorBody
		if json.Unmarshal(b, &body) == nil {
			w.code = body.Error.Code
		}
	}
	return w.ResponseWriter.Write(b)
}

// outcome is "ok" for a success, else the answer's error code (its status when it had none).
func (w *outcomeWriter) outcome() string {
	switch {
	case w.status < 400:
		return "ok"
	case w.code != "":
		return w.code
	default:
		return http.StatusText(w.status)
	}
}
