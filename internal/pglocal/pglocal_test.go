package pglocal

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
)

// The fallback for machines without a running server: initdb and start a private cluster from the
// installed binaries. Run as root (as CI does), this also proves the drop to an unprivileged user.
func TestStartPrivateClusterAndCreateDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	// The cluster may run as another user, who must be able to reach the folder.
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const port = 55499

	serverURL, err := StartPrivate(ctx, dir, port, log)
	if err != nil {
		t.Fatalf("start private cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := StopPrivate(context.Background(), dir); err != nil {
			t.Errorf("stop private cluster: %v", err)
		}
	})

	// Starting again finds it running.
	if again, err := StartPrivate(ctx, dir, port, log); err != nil || again != serverURL {
		t.Fatalf("second start = %q, %v; want %q", again, err, serverURL)
	}

	dbURL, err := Database(ctx, serverURL, "onceledger_probe")
	if err != nil {
		t.Fatalf("create database: %v", err)
	}
	if _, err := Database(ctx, serverURL, "onceledger_probe"); err != nil {
		t.Fatalf("database that exists: %v", err)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect to %s: %v", dbURL, err)
	}
	defer conn.Close(ctx)
	var name string
	if err := conn.QueryRow(ctx, `SELECT current_database()`).Scan(&name); err != nil || name != "onceledger_probe" {
		t.Fatalf("current_database() = %q, %v", name, err)
	}
}
