package api

import (
	"encoding/json"
	"net/http"
)

// outcomeWriter remembers the status of the answer and, for an error, its code, for the audit trail
// (package audit). The record is written after the handler, before the answer leaves the server's
// buffer: the hot routes' effects commit in groups (db.Ledger), and threading the record into those
// transactions would tie every member's record to its group's fate; the records of concurrent
// requests commit in groups of their own instead (docs/access.md).
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
