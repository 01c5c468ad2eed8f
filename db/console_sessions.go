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
// keyName the API key that logged in; it lasts at most lifetime.
func StartConsoleSession(ctx context.Context, q Conn, id []byte, keyName string, lifetime time.Duration) error {
	err := dbsqlc.New(q).ConsoleSessionsInsert(ctx, dbsqlc.ConsoleSessionsInsertParams{ID: id, KeyName: keyName,
		LifetimeSeconds: lifetime.Seconds()})
	if err != nil {
		return fmt.Errorf("start a console session: %w", MapError(err))
	}
	return nil
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

// RevokeConsoleSession ends session id (a logout) on every replica.
func RevokeConsoleSession(ctx context.Context, q Conn, id []byte) error {
	if err := dbsqlc.New(q).ConsoleSessionsRevoke(ctx, id); err != nil {
		return fmt.Errorf("revoke a console session: %w", MapError(err))
	}
	return nil
}
