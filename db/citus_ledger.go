package db

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// The posting paths on Citus (SPEC §15): chosen per connection by onCitus, with the queries of
// sql/queries/citus.sql. They keep every answer of the plain paths; what differs is where the
// guarantees live: a dedupe key is claimed globally in dedupe_claims (dedupe_claims_pkey) in the
// posting's transaction, and the chain is held per entry by ledger_chain on the ledger's shard.

// postCitus is Ledger.Post on Citus: lock the account row, claim the key, insert the entry numbered
// from the locked row. A key claimed already is an exact replay or ErrDedupeConflict, answered before a
// missing account or a refusal, as on plain PostgreSQL.
func (l Ledger) postCitus(ctx context.Context, tx Tx, p Posting) (Posted, error) {
	q := dbsqlc.New(tx)
	acct, err := q.CitusAccountsLock(ctx, p.AccountID)
	if err != nil && !isNoRows(err) {
		return Posted{}, fmt.Errorf("lock account %s: %w", p.AccountID, MapError(err))
	}
	missing := isNoRows(err)
	if p.DedupeKey != "" {
		claimed := missing
		if !missing {
			_, err := q.CitusDedupeClaimsInsert(ctx, dbsqlc.CitusDedupeClaimsInsertParams{DedupeKey: p.DedupeKey, AccountID: p.AccountID})
			if err != nil && !isNoRows(err) {
				return Posted{}, fmt.Errorf("claim dedupe key %q: %w", p.DedupeKey, MapError(err))
			}
			claimed = isNoRows(err)
		}
		if claimed {
			prior, found, err := citusClaimedEntry(ctx, q, p.DedupeKey)
			if err != nil {
				return Posted{}, err
			}
			if found {
				out, err := replayOrConflict(prior, p)
				l.observeTaken(p.Kind, err)
				return out, err
			}
			if !missing {
				return Posted{}, fmt.Errorf("dedupe key %q is claimed but holds no entry", p.DedupeKey)
			}
		}
	}
	if missing {
		return Posted{}, fmt.Errorf("post %s entry: %w: %s", p.Kind, ErrAccountNotFound, p.AccountID)
	}
	if balance, ok := addInt64(acct.Balance, p.Amount); p.NoOverdraw && ok && balance < 0 {
		return Posted{}, fmt.Errorf("post %d to %s: %w", p.Amount, p.AccountID, ErrInsufficientBalance)
	}
	inserted, err := q.CitusLedgerInsert(ctx, dbsqlc.CitusLedgerInsertParams{
		AccountID: p.AccountID, Kind: p.Kind, Amount: p.Amount, Description: p.Description,
		DedupeKey: nullable(p.DedupeKey), PaymentIntent: nullable(p.PaymentIntent),
		LastSeq: acct.LastSeq, Balance: acct.Balance,
	})
	if err != nil {
		return Posted{}, fmt.Errorf("insert %s entry for %s: %w", p.Kind, p.AccountID, MapError(err))
	}
	entry := Entry{
		ID: inserted.ID, AccountID: p.AccountID, Kind: p.Kind, Amount: p.Amount, Description: p.Description,
		DedupeKey: p.DedupeKey, PaymentIntent: p.PaymentIntent, CreatedAt: inserted.CreatedAt,
		Seq: inserted.Seq, BalanceAfter: inserted.BalanceAfter,
	}
	out := Posted{Entry: entry, Posted: true, Balance: inserted.BalanceAfter}
	if err := l.Posted(ctx, tx, []Posted{out}); err != nil {
		return Posted{}, err
	}
	return out, nil
}

// citusClaimedEntry reads the entry holding a claimed key from its account's shard; found is false when
// the key was never claimed.
func citusClaimedEntry(ctx context.Context, q *dbsqlc.Queries, key string) (Entry, bool, error) {
	account, err := q.CitusDedupeClaimsGet(ctx, key)
	if isNoRows(err) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, fmt.Errorf("read claim of dedupe key %q: %w", key, MapError(err))
	}
	row, err := q.CitusLedgerGetByAccountDedupeKey(ctx, dbsqlc.CitusLedgerGetByAccountDedupeKeyParams{AccountID: account, DedupeKey: key})
	if err != nil {
		return Entry{}, false, fmt.Errorf("read entry for dedupe key %q: %w", key, MapError(err))
	}
	return entryFromRow(row), true, nil
}

// unbilledByAccount is DecisionsUnbilledByAccount, on Citus through its colocated variant.
func unbilledByAccount(ctx context.Context, tx Tx, afterSeq, uptoSeq int64) ([]dbsqlc.DecisionsUnbilledByAccountRow, error) {
	q := dbsqlc.New(tx)
	citus, err := onCitus(ctx, tx)
	if err != nil || !citus {
		if err != nil {
			return nil, err
		}
		return q.DecisionsUnbilledByAccount(ctx, dbsqlc.DecisionsUnbilledByAccountParams{AfterSeq: afterSeq, UptoSeq: uptoSeq})
	}
	rows, err := q.CitusDecisionsUnbilledByAccount(ctx, dbsqlc.CitusDecisionsUnbilledByAccountParams{AfterSeq: afterSeq, UptoSeq: uptoSeq})
	out := make([]dbsqlc.DecisionsUnbilledByAccountRow, len(rows))
	for i, r := range rows {
		out[i] = dbsqlc.DecisionsUnbilledByAccountRow(r)
	}
	return out, err
}

// insertUsageCitus is LedgerUsageInsertForDecisions on Citus: the chunk's decision keys of the locked
// accounts claimed in one statement, then each account's claimed decisions billed in one statement on its
// shard, whose ledger_chain numbers the entries one by one in seq order.
func insertUsageCitus(ctx context.Context, tx Tx, afterSeq, uptoSeq int64, locked []string) ([]dbsqlc.LedgerUsageInsertForDecisionsRow, error) {
	q := dbsqlc.New(tx)
	claims, err := q.CitusDedupeClaimsForDecisions(ctx, dbsqlc.CitusDedupeClaimsForDecisionsParams{
		AccountIDs: locked, AfterSeq: afterSeq, UptoSeq: uptoSeq,
	})
	if err != nil {
		return nil, fmt.Errorf("claim decision keys after seq %d: %w", afterSeq, MapError(err))
	}
	claimed := map[string][]string{}
	for _, c := range claims {
		claimed[c.AccountID] = append(claimed[c.AccountID], c.DedupeKey)
	}
	var out []dbsqlc.LedgerUsageInsertForDecisionsRow
	for _, account := range locked {
		keys := claimed[account]
		if len(keys) == 0 {
			continue
		}
		rows, err := q.CitusLedgerUsageInsertForAccount(ctx, dbsqlc.CitusLedgerUsageInsertForAccountParams{
			AccountID: account, AfterSeq: afterSeq, UptoSeq: uptoSeq, Claimed: keys,
		})
		if err != nil {
			return nil, fmt.Errorf("bill decisions of %s: %w", account, MapError(err))
		}
		if len(rows) != len(keys) {
			return nil, errors.New("billing inserted another number of entries than the keys it claimed")
		}
		for _, r := range rows {
			out = append(out, dbsqlc.LedgerUsageInsertForDecisionsRow(r))
		}
	}
	return out, nil
}

// insertTopupForSession is TopupsInsertForSession, on Citus keyed by account and session.
func insertTopupForSession(ctx context.Context, q Conn, arg dbsqlc.TopupsInsertForSessionParams) error {
	citus, err := onCitus(ctx, q)
	if err != nil || !citus {
		if err != nil {
			return err
		}
		return dbsqlc.New(q).TopupsInsertForSession(ctx, arg)
	}
	return dbsqlc.New(q).CitusTopupsInsertForSession(ctx, dbsqlc.CitusTopupsInsertForSessionParams(arg))
}

// lockForBilling is AccountsLockForBilling; on Citus one router query per account, in id order, so that
// billing transactions still queue instead of deadlocking.
func lockForBilling(ctx context.Context, tx Tx, ids []string) ([]string, error) {
	q := dbsqlc.New(tx)
	citus, err := onCitus(ctx, tx)
	if err != nil || !citus {
		if err != nil {
			return nil, err
		}
		return q.AccountsLockForBilling(ctx, ids)
	}
	ids = slices.Clone(ids)
	slices.Sort(ids)
	var locked []string
	for _, id := range slices.Compact(ids) {
		_, err := q.CitusAccountsLockOne(ctx, id)
		if isNoRows(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		locked = append(locked, id)
	}
	return locked, nil
}

// parkedEventsForPaymentCitus is ParkedEventsForPayment on Citus: the parked events found across shards,
// then each locked on its own (the caller holds the payment's lock, LockPayment, so none is parked
// meanwhile). err is onCitus's failure, passed through.
func parkedEventsForPaymentCitus(ctx context.Context, tx Tx, paymentIntent string, err error) ([]ParkedEvent, error) {
	if err != nil {
		return nil, err
	}
	q := dbsqlc.New(tx)
	ids, err := q.CitusStripeEventsParkedIDsForPayment(ctx, paymentIntent)
	if err != nil {
		return nil, fmt.Errorf("find events parked for %s: %w", paymentIntent, MapError(err))
	}
	var out []ParkedEvent
	for _, id := range ids {
		r, err := q.CitusStripeEventsLockParked(ctx, id)
		if isNoRows(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("lock parked event %s: %w", id, MapError(err))
		}
		out = append(out, ParkedEvent{ID: r.EventID, Payload: r.Payload})
	}
	return out, nil
}

// unbillableAccounts is DecisionsUnbillableAccounts, on Citus through its colocated variant.
func unbillableAccounts(ctx context.Context, q Conn, afterSeq, uptoSeq int64) ([]dbsqlc.DecisionsUnbillableAccountsRow, error) {
	queries := dbsqlc.New(q)
	citus, err := onCitus(ctx, q)
	if err != nil || !citus {
		if err != nil {
			return nil, err
		}
		return queries.DecisionsUnbillableAccounts(ctx, dbsqlc.DecisionsUnbillableAccountsParams{AfterSeq: afterSeq, UptoSeq: uptoSeq})
	}
	rows, err := queries.CitusDecisionsUnbillableAccounts(ctx, dbsqlc.CitusDecisionsUnbillableAccountsParams{AfterSeq: afterSeq, UptoSeq: uptoSeq})
	out := make([]dbsqlc.DecisionsUnbillableAccountsRow, len(rows))
	for i, r := range rows {
		out[i] = dbsqlc.DecisionsUnbillableAccountsRow(r)
	}
	return out, err
}

// decisionsBillingLag is DecisionsBillingLag, on Citus through its colocated variant.
func decisionsBillingLag(ctx context.Context, q Conn, window int32) (dbsqlc.DecisionsBillingLagRow, error) {
	queries := dbsqlc.New(q)
	citus, err := onCitus(ctx, q)
	if err != nil || !citus {
		if err != nil {
			return dbsqlc.DecisionsBillingLagRow{}, err
		}
		return queries.DecisionsBillingLag(ctx, window)
	}
	r, err := queries.CitusDecisionsBillingLag(ctx, window)
	return dbsqlc.DecisionsBillingLagRow(r), err
}

// markTopupPaid is TopupsMarkPaid; on Citus the order's account is read first, so that the conditional
// UPDATE runs on its one shard.
func markTopupPaid(ctx context.Context, q Conn, arg dbsqlc.TopupsMarkPaidParams) (dbsqlc.Topup, error) {
	queries := dbsqlc.New(q)
	citus, err := onCitus(ctx, q)
	if err != nil || !citus {
		if err != nil {
			return dbsqlc.Topup{}, err
		}
		return queries.TopupsMarkPaid(ctx, arg)
	}
	account, err := queries.CitusTopupsAccountOfSession(ctx, arg.SessionID)
	if err != nil {
		return dbsqlc.Topup{}, err
	}
	return queries.CitusTopupsMarkPaid(ctx, dbsqlc.CitusTopupsMarkPaidParams{
		PaymentIntent: arg.PaymentIntent, PaidEventID: arg.PaidEventID, AccountID: account, SessionID: arg.SessionID,
	})
}

// expireLockedCitus is CreditLotsExpire and CreditLotsCloseExpiredEmpty on Citus: the expire:{lot_id}
// keys of the locked accounts' due lots claimed in one statement, then per account, on its shard, the
// claimed expiries posted in one statement (ledger_lots closes each lot) and the empty lots closed.
func expireLockedCitus(ctx context.Context, tx Tx, locked []string) ([]dbsqlc.CreditLotsExpireRow, error) {
	q := dbsqlc.New(tx)
	claims, err := q.CitusDedupeClaimsForExpiries(ctx, locked)
	if err != nil {
		return nil, fmt.Errorf("claim expiry keys: %w", MapError(err))
	}
	claimed := map[string][]string{}
	for _, c := range claims {
		claimed[c.AccountID] = append(claimed[c.AccountID], c.DedupeKey)
	}
	var out []dbsqlc.CreditLotsExpireRow
	for _, account := range locked {
		if keys := claimed[account]; len(keys) > 0 {
			rows, err := q.CitusCreditLotsExpireForAccount(ctx, dbsqlc.CitusCreditLotsExpireForAccountParams{AccountID: account, Claimed: keys})
			if err != nil {
				return nil, fmt.Errorf("post expiries of %s: %w", account, MapError(err))
			}
			if len(rows) != len(keys) {
				return nil, errors.New("the expiry pass posted another number of entries than the keys it claimed")
			}
			for _, r := range rows {
				out = append(out, dbsqlc.CreditLotsExpireRow(r))
			}
		}
		if _, err := q.CitusCreditLotsCloseExpiredEmptyForAccount(ctx, account); err != nil {
			return nil, fmt.Errorf("close expired lots of %s: %w", account, MapError(err))
		}
	}
	return out, nil
}
