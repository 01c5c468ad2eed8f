package pglocal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
)

// A Citus cluster for trying and testing onceledger scaled out (SPEC §15): a coordinator and two workers,
// each a private cluster like StartPrivate's, on loopback ports next to each other.
const (
	CoordinatorPort = 55440 // the workers listen on the ports after it
	clusterWorkers  = 2
)

// citusSettings load Citus into every node. A small machine runs all three nodes: 8 shards per table
// (Citus's default is 32) keep a schema change and a multi-shard query to a few connections per worker;
// Citus opens connections between nodes, so each node allows more than the default 100, in plain text on
// loopback (its default asks for TLS, which these private clusters do not set up).
var citusSettings = []string{"shared_preload_libraries=citus", "max_connections=300", "citus.shard_count=8",
	"citus.node_conninfo=sslmode=disable"}

// Cluster is a running Citus cluster: the maintenance URL of its coordinator and of each worker.
type Cluster struct {
	Coordinator string
	Workers     []string
}

// StartCluster initialises (once) and starts (if not running) a coordinator and two workers under
// dataDir/citus, and returns their URLs. It fails, saying why, when the installed PostgreSQL has no Citus.
func StartCluster(ctx context.Context, dataDir string, log *slog.Logger) (*Cluster, error) {
	if err := CitusInstalled(); err != nil {
		return nil, err
	}
	dataDir, err := clusterDataDir(dataDir)
	if err != nil {
		return nil, err
	}
	// The nodes may run as another user, who must be able to reach their folders.
	for _, dir := range []string{dataDir, filepath.Join(dataDir, "citus")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			return nil, err
		}
	}
	c := &Cluster{}
	for i, dir := range clusterNodeDirs(dataDir) {
		url, err := startPrivate(ctx, dir, CoordinatorPort+i, citusSettings, log)
		if err != nil {
			return nil, fmt.Errorf("start Citus node %s: %w", filepath.Base(dir), err)
		}
		if i == 0 {
			c.Coordinator = url
		} else {
			c.Workers = append(c.Workers, url)
		}
	}
	return c, nil
}

// StopCluster stops the nodes StartCluster started.
func StopCluster(ctx context.Context, dataDir string) error {
	dataDir, err := clusterDataDir(dataDir)
	if err != nil {
		return err
	}
	var errs []error
	for _, dir := range clusterNodeDirs(dataDir) {
		if _, err := os.Stat(filepath.Join(dir, "pg", "postmaster.pid")); err == nil {
			errs = append(errs, StopPrivate(ctx, dir))
		}
	}
	return errors.Join(errs...)
}

// clusterDataDir is dataDir made absolute, unless (as root) a folder above it keeps other users out: the
// nodes then live in a folder of the temporary directory named after it, where their user can reach them.
func clusterDataDir(dataDir string) (string, error) {
	dataDir, err := filepath.Abs(dataDir)
	if err != nil || os.Geteuid() != 0 {
		return dataDir, err
	}
	for dir := filepath.Dir(dataDir); ; dir = filepath.Dir(dir) {
		if info, err := os.Stat(dir); err == nil && info.Mode().Perm()&0o001 == 0 {
			return filepath.Join(os.TempDir(), "onceledger-"+strings.ReplaceAll(strings.Trim(dataDir, "/"), "/", "-")), nil
		}
		if dir == filepath.Dir(dir) {
			return dataDir, nil
		}
	}
}

func clusterNodeDirs(dataDir string) []string {
	dirs := []string{filepath.Join(dataDir, "citus", "coordinator")}
	for i := 1; i <= clusterWorkers; i++ {
		dirs = append(dirs, filepath.Join(dataDir, "citus", fmt.Sprintf("worker%d", i)))
	}
	return dirs
}

// CitusInstalled says whether the newest installed PostgreSQL has the Citus extension, and how to get it
// when it has not.
func CitusInstalled() error {
	bin, err := binDir()
	if err != nil {
		return err
	}
	// initdb may be a link in PATH to Debian's /usr/lib/postgresql/N/bin, next to N/lib.
	initdb, err := filepath.EvalSymlinks(filepath.Join(bin, "initdb"))
	if err != nil {
		return err
	}
	home := filepath.Dir(filepath.Dir(initdb))
	lib := filepath.Join(home, "lib", "citus.so")
	if _, err := os.Stat(lib); err != nil {
		return fmt.Errorf("Citus is not installed for the PostgreSQL in %s (no %s): build it with `make citus` "+
			"(../shared/vendor/citus/build.sh, as root)", home, lib)
	}
	return nil
}

// Database makes sure the named database exists on every node with the citus extension, that its
// coordinator knows itself and both workers (Citus keeps its nodes per database), and returns the
// coordinator's URL for it.
func (c *Cluster) Database(ctx context.Context, name string) (string, error) {
	nodes := append([]string{c.Coordinator}, c.Workers...)
	urls := make([]string, len(nodes))
	for i, node := range nodes {
		url, err := Database(ctx, node, name)
		if err != nil {
			return "", err
		}
		if err := execOn(ctx, url, `CREATE EXTENSION IF NOT EXISTS citus`); err != nil {
			return "", fmt.Errorf("create extension citus on %s: %w", url, err)
		}
		urls[i] = url
	}
	if err := execOn(ctx, urls[0], `SELECT citus_set_coordinator_host('127.0.0.1', $1)`, CoordinatorPort); err != nil {
		return "", fmt.Errorf("set the coordinator's host: %w", err)
	}
	for i := range c.Workers {
		// citus_add_node answers the existing node's id when it is already there.
		if err := execOn(ctx, urls[0], `SELECT citus_add_node('127.0.0.1', $1)`, CoordinatorPort+1+i); err != nil {
			return "", fmt.Errorf("add worker on port %d: %w", CoordinatorPort+1+i, err)
		}
	}
	return urls[0], nil
}

// DropDatabase drops the named database on every node, closing its connections.
func (c *Cluster) DropDatabase(ctx context.Context, name string) error {
	for _, node := range append([]string{c.Coordinator}, c.Workers...) {
		if err := execOn(ctx, node, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database %s on %s: %w", name, node, err)
		}
	}
	return nil
}

func execOn(ctx context.Context, url, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql, args...)
	return err
}
