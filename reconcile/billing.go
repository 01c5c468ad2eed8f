package reconcile

import (
	"context"
	"errors"
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
	// OutOfRange counts decisions left unbilled because billing them would carry their account's
	// balance beyond a bigint; the chunk bills the other accounts. OutOfRangeAccounts names those
	// accounts (at most maxWaitingNamed). They stay unbilled until an operator acts; verify reports them.
	OutOfRange         int64
	OutOfRangeAccounts []string
	// firstWaitingSeq is the lowest seq of a decision left unbilled, waiting or out of range (0:
	// none): the cursor stops before it.
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
		rows, err := postChunk(ctx, tx, afterSeq, uptoSeq, locked)
		if errors.Is(err, db.ErrOutOfRange) {
			// One account's sum would leave a bigint, which fails the whole statement: bill the others.
			if locked, err = leaveOutUnbillable(ctx, tx, afterSeq, uptoSeq, locked, &chunk); err != nil {
				return err
			}
			rows, err = postChunk(ctx, tx, afterSeq, uptoSeq, locked)
		}
		if err != nil {
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
	return uptoSeq, nil
}

// postChunk runs BillingChunkPost for the locked accounts in a savepoint, so that a statement failing
// with db.ErrOutOfRange leaves the chunk's transaction usable.
func postChunk(ctx context.Context, tx pgx.Tx, afterSeq, uptoSeq int64, locked []string) ([]dbsqlc.BillingChunkPostRow, error) {
	var rows []dbsqlc.BillingChunkPostRow
	if len(locked) == 0 {
		return nil, nil
	}
	err := db.InTx(ctx, tx, func(sp pgx.Tx) error {
		var err error
		rows, err = dbsqlc.New(sp).BillingChunkPost(ctx, dbsqlc.BillingChunkPostParams{AfterSeq: afterSeq, UptoSeq: uptoSeq, AccountIds: locked})
		return db.MapError(err)
	})
	return rows, err
}

// leaveOutUnbillable removes from locked the accounts whose decisions in the chunk cannot be billed
// without leaving a bigint, and records them in chunk.
func leaveOutUnbillable(ctx context.Context, tx pgx.Tx, afterSeq, uptoSeq int64, locked []string, chunk *BillReport) ([]string, error) {
	unbillable, err := db.UnbillableAccounts(ctx, tx, afterSeq, uptoSeq)
	if err != nil {
		return nil, err
	}
	if len(unbillable) == 0 {
		return nil, fmt.Errorf("a chunk's sums left a bigint, but no account's do: %w", db.ErrOutOfRange)
	}
	for _, u := range unbillable {
		locked = slices.DeleteFunc(locked, func(id string) bool { return id == u.AccountID })
		chunk.OutOfRange += u.Decisions
		chunk.OutOfRangeAccounts = append(chunk.OutOfRangeAccounts, u.AccountID)
		if chunk.firstWaitingSeq == 0 || u.FirstSeq < chunk.firstWaitingSeq {
			chunk.firstWaitingSeq = u.FirstSeq
		}
	}
	return locked, nil
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

// add folds a committed chunk into the pass's report.
func (rep *BillReport) add(chunk BillReport) {
	rep.Read += chunk.Read
	rep.Billed += chunk.Billed
	rep.Amount += chunk.Amount
	rep.Accounts += chunk.Accounts
	rep.Waiting += chunk.Waiting
	if chunk.firstWaitingSeq != 0 && (rep.firstWaitingSeq == 0 || chunk.firstWaitingSeq < rep.firstWaitingSeq) {
		rep.firstWaitingSeq = chunk.firstWaitingSeq
	}
	rep.OutOfRange += chunk.OutOfRange
	rep.WaitingAccounts = addNamed(rep.WaitingAccounts, chunk.WaitingAccounts)
	rep.OutOfRangeAccounts = addNamed(rep.OutOfRangeAccounts, chunk.OutOfRangeAccounts)
}

// addNamed adds the ids not named yet to named, up to maxWaitingNamed of them.
func addNamed(named, ids []string) []string {
	for _, id := range ids {
		if len(named) < maxWaitingNamed && !slices.Contains(named, id) {
			named = append(named, id)
		}
	}
	return named
}
