package db

import (
	"context"
	"fmt"
	"time"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// AuditRecord is one row of the audit trail (audit_log, migration 000021): who did what, to which ids,
// and how it ended.
type AuditRecord struct {
	ID int64
	At time.Time
	// AccountID is the account the request named, "" when none.
	AccountID string
	// KeyName is the API key's name, "" when no key was recognised.
	KeyName string
	// Action is the method and route pattern, or the console's action.
	Action string
	// TargetID is the other id the request named (a hold, a lot, an event), "" when none.
	TargetID string
	Status   int
	// Outcome is "ok" or the error code of the answer.
	Outcome    string
	RemoteAddr string
}

// AuditTrail appends records to the audit trail with group commit: the concurrent records of one
// account go in one statement, so that auditing the hot routes (postings, holds: their own effects
// commit in groups) costs a statement per group, not a transaction per request.
type AuditTrail struct {
	pool   *Pool
	groups *groupQueue[AuditRecord, struct{}, struct{}]
}

// NewAuditTrail returns the audit trail of pool's database.
func NewAuditTrail(pool *Pool) *AuditTrail {
	a := &AuditTrail{pool: pool}
	a.groups = newGroupQueue(defaultGroupWindow, defaultMaxGroup, a.commit)
	return a
}

// Record appends rec and returns once it is committed.
func (a *AuditTrail) Record(ctx context.Context, rec AuditRecord) error {
	_, err := a.groups.do(ctx, rec.AccountID, rec)
	return err
}

func (a *AuditTrail) commit(_ string, _ *struct{}, group []*groupMember[AuditRecord, struct{}]) {
	ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
	defer cancel()
	recs := make([]AuditRecord, len(group))
	for i, m := range group {
		recs[i] = m.req
	}
	err := RecordAudit(ctx, a.pool, recs...)
	for _, m := range group {
		m.reply(struct{}{}, err)
	}
}

// RecordAudit appends recs in one statement, on q: the pool, or the transaction of the effect they record.
func RecordAudit(ctx context.Context, q Conn, recs ...AuditRecord) error {
	p := dbsqlc.AuditLogInsertParams{
		AccountIDs:  make([]string, len(recs)),
		KeyNames:    make([]string, len(recs)),
		Actions:     make([]string, len(recs)),
		TargetIDs:   make([]string, len(recs)),
		Statuses:    make([]int16, len(recs)),
		Outcomes:    make([]string, len(recs)),
		RemoteAddrs: make([]string, len(recs)),
	}
	for i, r := range recs {
		p.AccountIDs[i], p.KeyNames[i], p.Actions[i], p.TargetIDs[i] = r.AccountID, r.KeyName, r.Action, r.TargetID
		p.Statuses[i], p.Outcomes[i], p.RemoteAddrs[i] = int16(r.Status), r.Outcome, r.RemoteAddr
	}
	if err := dbsqlc.New(q).AuditLogInsert(ctx, p); err != nil {
		return fmt.Errorf("record %d audit records: %w", len(recs), MapError(err))
	}
	return nil
}

// ListAudit returns the newest records before beforeID (0: from the newest), at most limit.
func ListAudit(ctx context.Context, q Conn, beforeID int64, limit int32) ([]AuditRecord, error) {
	rows, err := dbsqlc.New(q).AuditLogList(ctx, dbsqlc.AuditLogListParams{BeforeID: beforeID, LimitRows: limit})
	if err != nil {
		return nil, fmt.Errorf("list the audit trail: %w", MapError(err))
	}
	out := make([]AuditRecord, len(rows))
	for i, r := range rows {
		out[i] = AuditRecord{ID: r.ID, At: r.At, AccountID: r.AccountID, KeyName: r.KeyName, Action: r.Action,
			TargetID: r.TargetID, Status: int(r.Status), Outcome: r.Outcome, RemoteAddr: r.RemoteAddr}
	}
	return out, nil
}
