package api

import (
	"net/http"
	"time"

	"github.com/onceledger/onceledger/db"
)

type auditRecordJSON struct {
	ID         int64     `json:"id"`
	At         time.Time `json:"at"`
	KeyName    string    `json:"key_name"`
	Action     string    `json:"action"`
	AccountID  *string   `json:"account_id"`
	TargetID   *string   `json:"target_id"`
	Status     int       `json:"status"`
	Outcome    string    `json:"outcome"`
	RemoteAddr string    `json:"remote_addr"`
}

// handleListAudit lists the audit trail newest first, for admins: keyset pagination on id (?before=).
func handleListAudit(d Deps) http.Handler {
	type response struct {
		Records []auditRecordJSON `json:"records"`
		Next    *string           `json:"next"`
	}
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		limit, before, err := pageQuery(r, "before")
		if err != nil {
			return err
		}
		rows, err := db.ListAudit(r.Context(), d.Pool, before, int32(limit+1))
		if err != nil {
			return err
		}
		rows, next := onePage(rows, limit, func(a db.AuditRecord) int64 { return a.ID })
		out := response{Records: make([]auditRecordJSON, 0, len(rows)), Next: next}
		for _, a := range rows {
			out.Records = append(out.Records, auditRecordJSON{
				ID: a.ID, At: a.At, KeyName: a.KeyName, Action: a.Action, AccountID: orNull(a.AccountID),
				TargetID: orNull(a.TargetID), Status: a.Status, Outcome: a.Outcome, RemoteAddr: a.RemoteAddr,
			})
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}
