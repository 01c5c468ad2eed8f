package db

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// AuditRecord is one row of the audit trail (audit_log): who did what, to which ids,
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

// AuditTrail appends, after the answer, the records no effect's transaction wrote (PendingAudit): the
// refusals, the failures and the replays. It commits them in groups: the concurrent records of one
// account go in one statement, so that a flood of refusals costs a statement per group, not a
// transaction per request.
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
	return auditInsert(ctx, dbsqlc.New(q), recs)
}

// auditInsert appends recs in one statement on q (a pipelined step's too).
func auditInsert(ctx context.Context, q *dbsqlc.Queries, recs []AuditRecord) error {
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
	if err := q.AuditLogInsert(ctx, p); err != nil {
		return fmt.Errorf("record %d audit records: %w", len(recs), MapError(err))
	}
	return nil
}

// PendingAudit is the record of one request on its way to its effect. The guard that recognised the
// request's key puts it in the request's context (WithPendingAudit); the operation that commits the
// request's effect appends it, outcome "ok", in that same transaction (in a group's transaction, the
// group's records in one statement), so that the effect and its record commit or roll back together.
// The guard then records only what no transaction did (Written is false): a refusal, a failure, or a
// replay, an answer that wrote nothing (Replayed). A request's record is written once, either way.
type PendingAudit struct {
	rec     AuditRecord
	written atomic.Bool // its record committed with the request's effect
	replay  atomic.Bool // the request was answered from what was stored, and wrote nothing
}

type pendingAuditKey struct{}

// WithPendingAudit returns ctx carrying rec as its request's pending record, and the record. rec's
// Status is what the request answers once its effect commits (AnswersOnEffect changes it); its
// Outcome is "ok" when the effect's transaction writes it.
func WithPendingAudit(ctx context.Context, rec AuditRecord) (context.Context, *PendingAudit) {
	p := &PendingAudit{rec: rec}
	return context.WithValue(ctx, pendingAuditKey{}, p), p
}

// PendingAuditOf is the pending record ctx carries, nil when none: the nil record records nothing.
func PendingAuditOf(ctx context.Context) *PendingAudit {
	p, _ := ctx.Value(pendingAuditKey{}).(*PendingAudit)
	return p
}

// AnswersOnEffect sets the status the request answers when its effect commits (a creation's 201), before
// the operation that commits it runs.
func (p *PendingAudit) AnswersOnEffect(status int) {
	if p != nil {
		p.rec.Status = status
	}
}

// Written reports that the record committed in the transaction of the request's effect.
func (p *PendingAudit) Written() bool { return p != nil && p.written.Load() }

// Replayed reports that the operation answered from what was stored and wrote nothing.
func (p *PendingAudit) Replayed() bool { return p != nil && p.replay.Load() }

func (p *PendingAudit) markReplay() {
	if p != nil {
		p.replay.Store(true)
	}
}

// recordEffects appends in tx, in one statement, the records of ps, the requests whose effects tx
// writes (nil ones, and those written already, are skipped), and returns those it appended, to be
// marked written (markWritten) once tx has committed.
func recordEffects(ctx context.Context, tx Conn, ps ...*PendingAudit) ([]*PendingAudit, error) {
	recs, appended := effectRecords(ps)
	if len(recs) == 0 {
		return nil, nil
	}
	return appended, RecordAudit(ctx, tx, recs...)
}

// effectRecords returns the records recordEffects appends for ps, outcome "ok", and the pending
// records they are.
func effectRecords(ps []*PendingAudit) ([]AuditRecord, []*PendingAudit) {
	var (
		recs     []AuditRecord
		appended []*PendingAudit
	)
	for _, p := range ps {
		if p == nil || p.written.Load() {
			continue
		}
		rec := p.rec
		rec.Outcome = "ok"
		recs, appended = append(recs, rec), append(appended, p)
	}
	return recs, appended
}

// markWritten marks ps written: their transaction committed.
func markWritten(ps []*PendingAudit) {
	for _, p := range ps {
		p.written.Store(true)
	}
}

// InAuditedTx is InTx for the operation that commits the effect of ctx's request: fn reports whether
// it wrote one (changed); then the request's pending record is appended last in the same transaction,
// and marked written once it committed. A transaction that changed nothing makes the request a replay.
func InAuditedTx(ctx context.Context, b Beginner, fn func(tx Tx) (changed bool, err error)) error {
	return inAuditedTx(ctx, b, PendingAuditOf(ctx), fn)
}

// inAuditedTx is InAuditedTx for p's request, whose context is not ctx (a group's member).
func inAuditedTx(ctx context.Context, b Beginner, p *PendingAudit, fn func(tx Tx) (changed bool, err error)) error {
	var (
		changed  bool
		appended []*PendingAudit
	)
	err := InTx(ctx, b, func(tx Tx) (err error) {
		if changed, err = fn(tx); err != nil || !changed {
			return err
		}
		appended, err = recordEffects(ctx, tx, p)
		return err
	})
	switch {
	case err != nil:
	case changed:
		markWritten(appended)
	default:
		p.markReplay()
	}
	return err
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
