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
	// ErrInvalidAmount: the amount's sign does not fit its kind (ledger_kind_sign_check).
	ErrInvalidAmount = errors.New("amount sign does not fit the entry kind")
	// ErrAppendOnly: something tried to change or delete a ledger entry (ledger_append_only).
	ErrAppendOnly = errors.New("ledger entries are append-only")
	// ErrTransient: the database could not answer now (unreachable, serialization failure, deadlock,
	// shutting down); retrying later may succeed, and nothing was committed.
	ErrTransient = errors.New("database temporarily unavailable")
)

// constraintErrors maps a named schema object to the sentinel its violation means.
var constraintErrors = map[string]error{
	"ledger_account_fk":      ErrAccountNotFound,
	"topups_account_fk":      ErrAccountNotFound,
	"holds_account_fk":       ErrAccountNotFound,
	"ledger_kind_sign_check": ErrInvalidAmount,
	// A payment already paid another order: crediting it again would count one payment twice.
	"topups_payment_intent_key": ErrDedupeConflict,
}

// MapError turns a PostgreSQL error into a sentinel, by SQLSTATE and constraint name, keeping the
// original in the chain for logs. Errors it does not recognise pass through unchanged. Packages that
// run generated queries themselves (inside db.InTx) pass their errors through it.
func MapError(err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case pgerrcode.ForeignKeyViolation, pgerrcode.CheckViolation, pgerrcode.UniqueViolation:
			if sentinel, ok := constraintErrors[pgErr.ConstraintName]; ok {
				return fmt.Errorf("%w: %w", sentinel, err)
			}
		case pgerrcode.RestrictViolation:
			if strings.Contains(pgErr.Where, "ledger_refuse_change") {
				return fmt.Errorf("%w: %w", ErrAppendOnly, err)
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

// isConnectionError recognises failures to reach or keep the server: these are worth a retry.
func isConnectionError(err error) bool {
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	switch {
	case errors.As(err, &connectErr), errors.As(err, &netErr):
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
