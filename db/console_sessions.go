package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// StartConsoleSession records a logged-in console session: id is the SHA-256 of its cookie's token,
// keyName the API key that logged in; it lasts at most lifetime. The login's record (PendingAudit)
// commits with it.
func StartConsoleSession(ctx context.Context, b Beginner, id []byte, keyName string, lifetime time.Duration) error {
	return InAuditedTx(ctx, b, func(tx Tx) (bool, error) {
		err := dbsqlc.New(tx).ConsoleSessionsInsert(ctx, dbsqlc.ConsoleSessionsInsertParams{ID: id, KeyName: keyName,
			LifetimeSeconds: lifetime.Seconds()})
		if err != nil {
			return false, fmt.Errorf("start a console session: %w", MapError(err))
		}
		return true, nil
	})
}

// TouchConsoleSession returns the key name of session id when it is alive (not revoked, not expired,
// seen within idle), and marks it seen; ok is false otherwise.
func TouchConsoleSession(ctx context.Context, q Conn, id []byte, idle time.Duration) (keyName string, ok bool, err error) {
	keyName, err = dbsqlc.New(q).ConsoleSessionsTouch(ctx, dbsqlc.ConsoleSessionsTouchParams{ID: id, IdleSeconds: idle.Seconds()})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("read a console session: %w", MapError(err))
	}
	return keyName, true, nil
}

// RevokeConsoleSession ends session id (a logout) on every replica. The logout's record (PendingAudit)
// commits with it.
func RevokeConsoleSession(ctx context.Context, b Beginner, id []byte) error {
	return InAuditedTx(ctx, b, func(tx Tx) (bool, error) {
		if err := dbsqlc.New(tx).ConsoleSessionsRevoke(ctx, id); err != nil {
			return false, fmt.Errorf("revoke a console session: %w", MapError(err))
		}
		return true, nil
	})
}
