package db

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// Sentinels: the outcomes callers branch on. Every other error is unexpected.
var (
	// ErrNotFound: the row asked for does not exist.
	ErrNotFound = errors.New("not found")
	// ErrAccountNotFound: an entry or order names an account that does not exist (ledger_account_fk).
	ErrAccountNotFound = errors.New("account not found")
	// ErrDedupeConflict: the dedupe key was already posted with another account, kind or amount. Not a
	// replay: a bug or an attack, and nothing was written.
	ErrDedupeConflict = errors.New("dedupe key already posted with different parameters")
	// ErrInsufficientBalance: a no-overdraw debit would take the balance below zero.
	ErrInsufficientBalance = errors.New("insufficient balance")
	// ErrCurrencyMismatch: the account exists with another currency.
	ErrCurrencyMismatch = errors.New("account exists with another currency")
	// ErrParentNotFound: a new member names a parent that does not exist (accounts_parent_fk).
	ErrParentNotFound = errors.New("parent account not found")
	// ErrParentImmutable: the account exists with another parent; a parent is set at creation only
	// (accounts_parent_immutable).
	ErrParentImmutable = errors.New("account exists with another parent")
	// ErrTreeTooDeep: the parent is a tree's third level already, or the parent would make a cycle
	// (accounts_depth_check, accounts_parent_acyclic_check).
	ErrTreeTooDeep = errors.New("a tree of pools has at most three levels")
	// ErrInvalidAmount: the amount's sign does not fit its kind (ledger_kind_sign_check).
	ErrInvalidAmount = errors.New("amount sign does not fit the entry kind")
	// ErrAppendOnly: something tried to change or delete a ledger entry (ledger_append_only).
	ErrAppendOnly = errors.New("ledger entries are append-only")
	// ErrChainBroken: inserted entries did not continue their account's seq and balance_after chain
	// (ledger_chain); nothing was written. A posting path that locked its account and read what it
	// inserts under that lock never sees it.
	ErrChainBroken = errors.New("ledger entries do not continue their account's chain")
	// ErrOutOfRange: an amount or a sum of amounts (a balance, a billing total) would leave the range
	// of a bigint (numeric_value_out_of_range). Nothing was written; the same request fails the same way
	// until the balance moves, so it is refused (409, or parked), never retried as transient.
	ErrOutOfRange = errors.New("amount or balance out of range")
	// ErrTransient: the database could not answer now (unreachable, serialization failure, deadlock,
	// shutting down); retrying later may succeed, and nothing was committed.
	ErrTransient = errors.New("database temporarily unavailable")
)

// constraintErrors maps a named schema object, by table and name, to the sentinel its violation means.
var constraintErrors = map[[2]string]error{
	{"ledger", "ledger_account_fk"}:             ErrAccountNotFound,
	{"topups", "topups_account_fk"}:             ErrAccountNotFound,
	{"holds", "holds_account_fk"}:               ErrAccountNotFound,
	{"spend_limits", "spend_limits_account_fk"}: ErrAccountNotFound,
	{"ledger", "ledger_kind_sign_check"}:        ErrInvalidAmount,
	// Raised by accounts_parent_tree, the function behind the trigger of the same name, and CHECKs.
	{"accounts", "accounts_parent_fk"}:             ErrParentNotFound,
	{"accounts", "accounts_parent_currency_check"}: ErrCurrencyMismatch,
	{"accounts", "accounts_parent_immutable"}:      ErrParentImmutable,
	{"accounts", "accounts_depth_check"}:           ErrTreeTooDeep,
	{"accounts", "accounts_parent_acyclic_check"}:  ErrTreeTooDeep,
	// Raised by ledger_refuse_change, the function behind triggers ledger_append_only and ledger_no_truncate.
	{"ledger", "ledger_append_only"}: ErrAppendOnly,
	// Raised by ledger_chain_advance, the function behind trigger ledger_chain.
	{"ledger", "ledger_chain"}: ErrChainBroken,
	// A payment already paid another order: crediting it again would count one payment twice.
	{"topups", "topups_payment_intent_key"}: ErrDedupeConflict,
	// Raised by revenue_periods_refuse_change, behind the triggers revenue_periods_frozen (and *_truncate).
	{"revenue_periods", "revenue_periods_frozen"}:         ErrPeriodFrozen,
	{"revenue_period_balances", "revenue_periods_frozen"}: ErrPeriodFrozen,
}

// MapError turns a PostgreSQL error into a sentinel, by SQLSTATE, table and constraint name, keeping the
// original in the chain for logs. Errors it does not recognise pass through unchanged. Every
// operation of this package passes its errors through it; callers need it only for what they run
// themselves, such as a commit failing.
func MapError(err error) error {
	if err == nil {
		return nil
	}
	// First: a server that refused the connection answers with a FATAL of any SQLSTATE (wrong password,
	// no such database, not accepting connections), and nothing was attempted; the PgError it wraps
	// must not be read as a statement's failure.
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return fmt.Errorf("%w: %w", ErrTransient, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case pgerrcode.NumericValueOutOfRange:
			return fmt.Errorf("%w: %w", ErrOutOfRange, err)
		case pgerrcode.ForeignKeyViolation, pgerrcode.CheckViolation, pgerrcode.UniqueViolation,
			pgerrcode.RestrictViolation:
			if sentinel, ok := constraintErrors[constraintOf(pgErr)]; ok {
				return fmt.Errorf("%w: %w", sentinel, err)
			}
		case pgerrcode.InternalError:
			// Citus relays a violation raised on a shard while it copies rows there (a multi-row
			// INSERT ... SELECT) as an internal error, keeping the detail our triggers set.
			if m := citusDetail.FindStringSubmatch(pgErr.Detail); m != nil {
				if sentinel, ok := constraintErrors[[2]string{m[2], m[1]}]; ok {
					return fmt.Errorf("%w: %w", sentinel, err)
				}
			}
		case pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected,
			pgerrcode.AdminShutdown, pgerrcode.CrashShutdown, pgerrcode.CannotConnectNow,
			pgerrcode.TooManyConnections:
			return fmt.Errorf("%w: %w", ErrTransient, err)
		}
		if pgerrcode.IsConnectionException(pgErr.Code) {
			return fmt.Errorf("%w: %w", ErrTransient, err)
		}
		return err
	}
	if isConnectionError(err) {
		return fmt.Errorf("%w: %w", ErrTransient, err)
	}
	return err
}

// refusedByData: the statement was refused for what it was asked to write (SQLSTATE classes 22, data
// exception, and 23, integrity constraint violation), not because the database failed.
func refusedByData(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "23"))
}

// lockNotAvailable: a lock was not granted within the transaction's lock_timeout.
func lockNotAvailable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.LockNotAvailable
}

// isConnectionError recognises failures to reach or keep the server: these are worth a retry.
func isConnectionError(err error) bool {
	var netErr net.Error
	switch {
	case errors.As(err, &netErr):
		return true
	case pgconn.SafeToRetry(err), pgconn.Timeout(err):
		return true
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	}
	return false
}

// IsTransient reports whether err means "try again later": the database was unreachable or asked for
// a retry, and the transaction did not commit. The webhook answers 503 to these, so Stripe retries.
func IsTransient(err error) bool {
	return err != nil && errors.Is(MapError(err), ErrTransient)
}

func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedTable
}

// addInt64 returns a+b and whether it fits an int64: sums of amounts are checked, never wrapped.
func addInt64(a, b int64) (int64, bool) {
	sum := a + b
	return sum, (b >= 0) == (sum >= a)
}
