package reconcile

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbsqlc"
)

// BillReport says what one billing pass did.
type BillReport struct {
	// FromSeq is where the pass started (exclusive); LastSeq where it stopped (inclusive).
	FromSeq, LastSeq int64
	// Chunks and Read count the chunks and the decisions read, billed or not.
	Chunks int
	Read   int64
	// Billed is the number of usage entries this pass inserted, Amount their sum (negative), and
	// Accounts the number of distinct accounts whose balance moved (counted per chunk).
	Billed   int64
	Amount   int64
	Accounts int64
	// Waiting counts decisions left unbilled because their account does not exist yet; a later pass
	// bills them once it does. WaitingAccounts names those accounts (at most maxWaitingNamed).
	Waiting         int64
	WaitingAccounts []string
	// HoldsCaptured counts the holds captured by billing their decisions; CostsAboveHold those whose
	// decision cost more than the hold (billed in full all the same).
	HoldsCaptured  int64
	CostsAboveHold int64
	// firstWaitingSeq is the lowest seq of a waiting decision (0: none): the cursor stops before it.
	firstWaitingSeq int64
	Elapsed         time.Duration
}

// maxWaitingNamed bounds the account ids a report carries: the count is what matters.
const maxWaitingNamed = 20

// Bill bills every decision with a seq above afterSeq that is not billed yet, chunk by chunk, and
// returns what it did. Bill(ctx, 0) is a full pass. It is safe to run any number of times and from
// any number of processes at once: ledger_dedupe_idx bills each decision at most once, and chunks
// lock their accounts in id order, so concurrent passes queue instead of deadlocking.
func (r *Reconciler) Bill(ctx context.Context, afterSeq int64) (BillReport, error) {
	started := time.Now()
	rep := BillReport{FromSeq: afterSeq, LastSeq: afterSeq}
	lastSeq, err := dbsqlc.New(r.pool).BillingDecisionsLastSeq(ctx)
	if err != nil {
		return rep, fmt.Errorf("read last decision seq: %w", err)
	}
	for after := afterSeq; after < lastSeq; {
		upto, err := r.billChunk(ctx, after, lastSeq, &rep)
		if err != nil {
			return rep, fmt.Errorf("bill decisions after seq %d: %w", after, err)
		}
		if upto == after {
			break
		}
		after, rep.LastSeq = upto, upto
		rep.Chunks++
		if r.progress != nil && r.progressEvery > 0 && rep.Chunks%r.progressEvery == 0 {
			rep.Elapsed = time.Since(started)
			r.progress(rep)
		}
	}
	rep.Elapsed = time.Since(started)
	return rep, nil
}

// billChunk bills the next chunk after afterSeq in one transaction and returns the seq ending it
// (afterSeq when no decision is left).
func (r *Reconciler) billChunk(ctx context.Context, afterSeq, lastSeq int64, rep *BillReport) (uptoSeq int64, err error) {
	var chunk BillReport
	err = db.InTx(ctx, r.pool, func(tx pgx.Tx) error {
		q := dbsqlc.New(tx)
		end, err := q.BillingChunkEnd(ctx, dbsqlc.BillingChunkEndParams{
			AfterSeq: afterSeq, LastSeq: lastSeq, ChunkSize: int32(r.chunkSize),
		})
		if err != nil || end.Decisions == 0 {
			return err
		}
		uptoSeq, chunk.Read = end.UptoSeq, end.Decisions
		unbilled, err := q.BillingChunkUnbilled(ctx, dbsqlc.BillingChunkUnbilledParams{AfterSeq: afterSeq, UptoSeq: uptoSeq})
		if err != nil || len(unbilled) == 0 {
			// Everything in the chunk was billed before: a re-read, and nothing to write.
			return err
		}
		ids := make([]string, len(unbilled))
		for i, u := range unbilled {
			ids[i] = u.AccountID
		}
		locked, err := q.BillingAccountsLock(ctx, ids)
		if err != nil {
			return err
		}
		noteWaiting(&chunk, unbilled, locked)
		if len(locked) == 0 {
			return nil
		}
		rows, err := q.BillingChunkPost(ctx, dbsqlc.BillingChunkPostParams{AfterSeq: afterSeq, UptoSeq: uptoSeq, AccountIds: locked})
		if err != nil {
			return err
		}
		if err := captureHolds(ctx, tx, afterSeq, uptoSeq, locked, &chunk); err != nil {
			return err
		}
		return r.posted(ctx, tx, rows, &chunk)
	})
	if err != nil {
		return afterSeq, err
	}
	if chunk.Read == 0 {
		return afterSeq, nil
	}
	rep.add(chunk)
	r.metrics.BilledDecisions.Add(float64(chunk.Billed))
	r.metrics.CapturedHolds.Add(float64(chunk.HoldsCaptured))
	r.metrics.CostsAboveHold.Add(float64(chunk.CostsAboveHold))
	return uptoSeq, nil
}

// noteWaiting records the unbilled decisions whose account BillingAccountsLock did not find.
func noteWaiting(chunk *BillReport, unbilled []dbsqlc.BillingChunkUnbilledRow, locked []string) {
	exists := make(map[string]bool, len(locked))
	for _, id := range locked {
		exists[id] = true
	}
	for _, u := range unbilled {
		if exists[u.AccountID] {
			continue
		}
		chunk.Waiting += u.Decisions
		if chunk.firstWaitingSeq == 0 || u.FirstSeq < chunk.firstWaitingSeq {
			chunk.firstWaitingSeq = u.FirstSeq
		}
		chunk.WaitingAccounts = append(chunk.WaitingAccounts, u.AccountID)
	}
}

// posted hands the chunk's new entries to the ledger's OnPosted hook (notifications), inside the
// chunk's transaction, and counts them.
func (r *Reconciler) posted(ctx context.Context, tx pgx.Tx, rows []dbsqlc.BillingChunkPostRow, chunk *BillReport) error {
	posted := make([]db.Posted, len(rows))
	accounts := make(map[string]struct{})
	for i, row := range rows {
		posted[i] = db.Posted{
			Entry: db.Entry{
				ID: row.ID, AccountID: row.AccountID, Kind: db.KindUsage, Amount: row.Amount,
				Description: row.Description, DedupeKey: row.DedupeKey, CreatedAt: row.CreatedAt,
			},
			Posted:  true,
			Balance: row.Balance,
		}
		chunk.Amount += row.Amount
		accounts[row.AccountID] = struct{}{}
	}
	chunk.Billed = int64(len(rows))
	chunk.Accounts = int64(len(accounts))
	return r.ledger.Posted(ctx, tx, posted)
}

// captureHolds captures, in the chunk's transaction, the holds named by the decisions it just billed
// (a separate statement after the usage insert, so that a decision's hold is resolved with its bill).
func captureHolds(ctx context.Context, tx pgx.Tx, afterSeq, uptoSeq int64, locked []string, chunk *BillReport) error {
	holds, err := db.CaptureHoldsForDecisions(ctx, tx, afterSeq, uptoSeq, locked)
	if err != nil {
		return err
	}
	for _, h := range holds {
		chunk.HoldsCaptured++
		if h.Cost > h.Amount {
			chunk.CostsAboveHold++
		}
	}
	return nil
}

// add folds a committed chunk into the pass's report.
func (rep *BillReport) add(chunk BillReport) {
	rep.Read += chunk.Read
	rep.Billed += chunk.Billed
	rep.Amount += chunk.Amount
	rep.Accounts += chunk.Accounts
	rep.Waiting += chunk.Waiting
	rep.HoldsCaptured += chunk.HoldsCaptured
	rep.CostsAboveHold += chunk.CostsAboveHold
	if chunk.firstWaitingSeq != 0 && (rep.firstWaitingSeq == 0 || chunk.firstWaitingSeq < rep.firstWaitingSeq) {
		rep.firstWaitingSeq = chunk.firstWaitingSeq
	}
	for _, id := range chunk.WaitingAccounts {
		if len(rep.WaitingAccounts) < maxWaitingNamed && !slices.Contains(rep.WaitingAccounts, id) {
			rep.WaitingAccounts = append(rep.WaitingAccounts, id)
		}
	}
}
