package pglocal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A Citus cluster for trying and testing onceledger scaled out (SPEC §15): a coordinator and two workers,
// each a private cluster like StartPrivate's, on loopback ports next to each other.
const (
	CoordinatorPort = 55440 // the workers listen on the ports after it
	clusterWorkers  = 2
)

// citusSettings load Citus into every node. A small machine runs all three nodes: one shard per table
// and worker (Citus's default is 32 per table), since every transaction over several accounts (a webhook
// group, a billing chunk, a cascade) sends a statement to each shard it touches, one after the other on
// each worker: first deliveries at 32 concurrent took about 340/s over 8 shards, 410/s over 4 and 570/s
// over 2 (docs/scaling.md);
// Citus opens connections between nodes, so each node allows more than the default 100, in plain text on
// loopback (its default asks for TLS, which these private clusters do not set up). A statement runs its
// shards over one connection per worker: with Citus's default (up to 16), a webhook delivery's reads over
// every shard opened a new worker backend per delivery and worker, which the transaction's end closed
// again (only one is cached), and half of the two cores' time went to the kernel (docs/scaling.md
// measures both). Every database with the extension has a maintenance daemon, a background worker (two-phase
// commit recovery, distributed deadlock detection): tests run many databases at once, each needing one.
// JIT is off on every node, as db.Open turns it off in the service's own sessions: the tasks of a
// distributed statement run in the sessions Citus opens to the nodes, with the nodes' settings, and a
// billing chunk's tasks were compiled there (about a sixth of a pass, docs/scaling.md).
var citusSettings = []string{"shared_preload_libraries=citus", "max_connections=300", "citus.shard_count=2",
	"citus.max_adaptive_executor_pool_size=1", "citus.node_conninfo=sslmode=disable", "max_worker_processes=64",
	"jit=off"}

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
		nodeURL, err := startPrivate(ctx, dir, CoordinatorPort+i, citusSettings, log)
		if err != nil {
			return nil, fmt.Errorf("start Citus node %s: %w", filepath.Base(dir), err)
		}
		if i == 0 {
			c.Coordinator = nodeURL
		} else {
			c.Workers = append(c.Workers, nodeURL)
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
	nodes := c.nodes()
	urls := make([]string, len(nodes))
	for i, node := range nodes {
		dbURL, err := Database(ctx, node, name)
		if err != nil {
			return "", err
		}
		if err := execOn(ctx, dbURL, `CREATE EXTENSION IF NOT EXISTS citus`); err != nil {
			return "", fmt.Errorf("create extension citus on %s: %w", dbURL, err)
		}
		urls[i] = dbURL
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
	for _, node := range c.nodes() {
		// A worker's database may be reached again by its maintenance daemon, or by a connection from the
		// coordinator being closed, right after FORCE closed the others: then it is dropped again shortly.
		var err error
		for attempt := 0; attempt < 20; attempt++ {
			err = execOn(ctx, node, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "55006" { // object_in_use
				break
			}
			if err := rollbackPrepared(ctx, node, name); err != nil {
				return fmt.Errorf("drop database %s on %s: %w", name, node, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("drop database %s on %s: %w", name, node, err)
		}
	}
	return nil
}

// rollbackPrepared rolls back the transactions prepared in the named database on one node, which FORCE
// does not end: a worker's half of a two-phase commit whose coordinator backend was ended before
// COMMIT PREPARED (its database dropped first, or a test killing its server mid-commit). Only Citus's
// maintenance daemon in the coordinator's database would resolve them, and that database is going too.
// A prepared transaction is ended only from its own database.
func rollbackPrepared(ctx context.Context, node, name string) error {
	var gids []string
	conn, err := pgx.Connect(ctx, node)
	if err != nil {
		return err
	}
	rows, err := conn.Query(ctx, `SELECT gid FROM pg_prepared_xacts WHERE database = $1`, name)
	if err == nil {
		gids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	conn.Close(context.WithoutCancel(ctx))
	if err != nil || len(gids) == 0 {
		return err
	}
	dbURL, err := databaseURL(node, name)
	if err != nil {
		return err
	}
	for _, gid := range gids {
		// The gid as a literal (ROLLBACK PREPARED takes no parameter). One resolved meanwhile (42704: no
		// such prepared transaction) is as good as rolled back here.
		err := execOn(ctx, dbURL, "ROLLBACK PREPARED '"+strings.ReplaceAll(gid, "'", "''")+"'")
		var pgErr *pgconn.PgError
		if err != nil && !(errors.As(err, &pgErr) && pgErr.Code == "42704") {
			return fmt.Errorf("roll back prepared transaction %s: %w", gid, err)
		}
	}
	return nil
}

// Freeze makes the named database a template on every node: nobody may connect to it any more, and the
// connections it has (Citus's maintenance daemon, the connections between nodes) are closed, since a
// database is copied only while nobody is connected to it. Clone copies it.
func (c *Cluster) Freeze(ctx context.Context, name string) error {
	for _, node := range c.nodes() {
		if err := execOn(ctx, node, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" ALLOW_CONNECTIONS false"); err != nil {
			return fmt.Errorf("freeze database %s on %s: %w", name, node, err)
		}
		if err := execOn(ctx, node, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, name); err != nil {
			return fmt.Errorf("close the connections to %s on %s: %w", name, node, err)
		}
	}
	return nil
}

// Frozen says whether the named database is a template on every node (Freeze finished).
func (c *Cluster) Frozen(ctx context.Context, name string) (bool, error) {
	for _, node := range c.nodes() {
		conn, err := pgx.Connect(ctx, node)
		if err != nil {
			return false, err
		}
		var frozen bool
		err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1 AND NOT datallowconn)`, name).Scan(&frozen)
		conn.Close(context.WithoutCancel(ctx))
		if err != nil || !frozen {
			return false, err
		}
	}
	return true, nil
}

// Clone makes a database on every node as a copy of the template that Freeze made, and returns the
// coordinator's URL for it. The copies are one Citus database: each node's metadata names the same
// nodes, and a coordinator reaches its workers' databases by its own database's name.
func (c *Cluster) Clone(ctx context.Context, template, name string) (string, error) {
	for _, node := range c.nodes() {
		stmt := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize() + " TEMPLATE " + pgx.Identifier{template}.Sanitize()
		if err := execOn(ctx, node, stmt); err != nil {
			return "", fmt.Errorf("copy database %s to %s on %s: %w", template, name, node, err)
		}
	}
	u, err := url.Parse(c.Coordinator)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

func (c *Cluster) nodes() []string { return append([]string{c.Coordinator}, c.Workers...) }

func execOn(ctx context.Context, nodeURL, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, nodeURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql, args...)
	return err
}
