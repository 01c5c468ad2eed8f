package reconcile

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/onceledger/onceledger/db"
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
	// HoldsCaptured counts the holds captured by billing their decisions; CostsAboveHold those whose
	// decision cost more than the hold (billed in full all the same).
	HoldsCaptured  int64
	CostsAboveHold int64
	// OverLimit is what billed decisions took past hard spend limits' caps.
	OverLimit int64
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
	lastSeq, err := db.LastDecisionSeq(ctx, r.pool)
	if err != nil {
		return rep, err
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
	billed, err := r.ledger.BillChunk(ctx, afterSeq, lastSeq, r.chunkSize)
	if err != nil || billed.Read == 0 {
		return afterSeq, err
	}
	chunk := BillReport{Read: billed.Read, Billed: int64(len(billed.Posted)), OverLimit: billed.OverLimit}
	accounts := make(map[string]struct{})
	for _, p := range billed.Posted {
		chunk.Amount += p.Amount
		accounts[p.AccountID] = struct{}{}
	}
	chunk.Accounts = int64(len(accounts))
	for _, w := range billed.Waiting {
		chunk.Waiting += w.Decisions
		if chunk.firstWaitingSeq == 0 || w.FirstSeq < chunk.firstWaitingSeq {
			chunk.firstWaitingSeq = w.FirstSeq
		}
		chunk.WaitingAccounts = append(chunk.WaitingAccounts, w.AccountID)
	}
	for _, u := range billed.Unbillable {
		chunk.OutOfRange += u.Decisions
		chunk.OutOfRangeAccounts = append(chunk.OutOfRangeAccounts, u.AccountID)
		if chunk.firstWaitingSeq == 0 || u.FirstSeq < chunk.firstWaitingSeq {
			chunk.firstWaitingSeq = u.FirstSeq
		}
	}
	for _, h := range billed.HoldsCaptured {
		chunk.HoldsCaptured++
		if h.Cost > h.Amount {
			chunk.CostsAboveHold++
		}
	}
	rep.add(chunk)
	r.metrics.BilledDecisions.Add(float64(chunk.Billed))
	r.metrics.CapturedHolds.Add(float64(chunk.HoldsCaptured))
	r.metrics.CostsAboveHold.Add(float64(chunk.CostsAboveHold))
	r.metrics.SpendOverLimit.Add(float64(chunk.OverLimit))
	return billed.UptoSeq, nil
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
	rep.OverLimit += chunk.OverLimit
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
