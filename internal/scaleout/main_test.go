//go:build citus

package scaleout_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/pglocal"
)

// suiteDB is the database every test of the suite shares, each with accounts and ids of its own: a
// Citus database spans three servers, so it is made once rather than cloned per test.
const suiteDB = "onceledger_scaleout"

var pool *db.Pool

// TestMain starts the cluster (failing, never skipping, when Citus cannot be had), migrates a fresh
// database, runs the suite, and then verifies the ledger that the whole suite left: every invariant
// must hold on the cluster as on plain PostgreSQL.
func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scaleout:", err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cluster, err := pglocal.StartCluster(ctx, filepath.Join("..", "..", ".data"), log)
	if err != nil {
		return 1, fmt.Errorf("no Citus cluster: %w", err)
	}
	if err := cluster.DropDatabase(ctx, suiteDB); err != nil {
		return 1, err
	}
	url, err := cluster.Database(ctx, suiteDB)
	if err != nil {
		return 1, err
	}
	// Twice: the second run finds every migration applied and the tables distributed, and runs the
	// distribute step (sql/citus/prepare.sql) again, which must change nothing.
	for range 2 {
		ms, err := db.OpenMigrations(url)
		if err != nil {
			return 1, err
		}
		err = ms.Up()
		ms.Close()
		if err != nil {
			return 1, err
		}
	}
	if pool, err = db.Open(ctx, url); err != nil {
		return 1, err
	}
	defer pool.Close()

	code := m.Run()
	if code != 0 {
		return code, nil
	}
	violations, err := db.Verify(ctx, pool, time.Now(), 24*time.Hour, time.Hour)
	if err != nil {
		return 1, fmt.Errorf("verify after the suite: %w", err)
	}
	for _, v := range violations {
		fmt.Fprintln(os.Stderr, "verify:", v)
	}
	if len(violations) > 0 {
		return 1, fmt.Errorf("verify found %d violations after the suite", len(violations))
	}
	fmt.Println("verify: clean after the suite")
	return 0, nil
}
