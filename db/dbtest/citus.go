package dbtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/pglocal"
	"github.com/onceledger/onceledger/sql/citus"
)

// BackendVariable names the backend the tests of a run use: "citus" for the local Citus cluster
// (make test-citus), anything else for plain PostgreSQL.
const BackendVariable = "ONCELEDGER_TEST_BACKEND"

// OnCitus reports whether this run's tests get their databases on the Citus cluster.
func OnCitus() bool { return os.Getenv(BackendVariable) == "citus" }

// On the cluster a database spans three servers. It is still one database per test: the template, made
// once per set of migrations (and of the distribute step's SQL), is migrated and distributed on every
// node, and each test's database is a copy of it on every node, which takes a fraction of a second.

var (
	clusterOnce     sync.Once
	cluster         *pglocal.Cluster
	clusterTemplate string
	clusterErr      error
)

func citusURL(t testing.TB) string {
	t.Helper()
	clusterOnce.Do(func() { cluster, clusterTemplate, clusterErr = citusTemplate(context.Background()) })
	if clusterErr != nil {
		t.Fatalf("dbtest: no Citus cluster for tests: %v", clusterErr)
	}
	name := "onceledger_test_" + strings.ToLower(rand.Text()[:16])
	url, err := cluster.Clone(context.Background(), clusterTemplate, name)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("dbtest: kept the cluster database of the failed test: %s", url)
			return
		}
		if err := cluster.DropDatabase(context.Background(), name); err != nil {
			t.Errorf("dbtest: %v", err)
		}
	})
	return url
}

// citusTemplate starts the cluster and makes its template database unless a previous run (or a test
// package running beside this one: they wait for each other) made it already.
func citusTemplate(ctx context.Context) (*pglocal.Cluster, string, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, "", err
	}
	c, err := pglocal.StartCluster(ctx, filepath.Join(root, ".data"), slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		return nil, "", err
	}
	hash, err := migrator{}.Hash()
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256([]byte(hash + citus.Prepare))
	name := "onceledger_citus_template_" + hex.EncodeToString(sum[:])[:16]

	lock, err := pgx.Connect(ctx, c.Coordinator)
	if err != nil {
		return nil, "", err
	}
	defer lock.Close(context.WithoutCancel(ctx))
	if _, err := lock.Exec(ctx, `SELECT pg_advisory_lock(hashtext('onceledger dbtest citus template'))`); err != nil {
		return nil, "", err
	}
	switch frozen, err := c.Frozen(ctx, name); {
	case err != nil:
		return nil, "", err
	case frozen:
		return c, name, nil
	}
	// Whatever a run interrupted half-way left is made again from nothing.
	if err := c.DropDatabase(ctx, name); err != nil {
		return nil, "", err
	}
	url, err := c.Database(ctx, name)
	if err != nil {
		return nil, "", err
	}
	ms, err := db.OpenMigrations(url)
	if err != nil {
		return nil, "", err
	}
	err = ms.Up()
	ms.Close()
	if err != nil {
		return nil, "", fmt.Errorf("migrate the cluster's template: %w", err)
	}
	if err := c.Freeze(ctx, name); err != nil {
		return nil, "", err
	}
	return c, name, nil
}
