//go:build citus

package pglocal

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
)

// A test that kills its server in the middle of a two-phase commit can leave a worker's half prepared:
// FORCE does not end a prepared transaction, and only the coordinator's database, dropped first, would
// have resolved it. DropDatabase rolls such transactions back and drops the database on every node.
func TestClusterDropsADatabaseLeftWithAPreparedTransaction(t *testing.T) {
	ctx := context.Background()
	c, err := StartCluster(ctx, filepath.Join("..", "..", ".data"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	const name = "onceledger_pglocal_prepared"
	if err := c.DropDatabase(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Database(ctx, name); err != nil {
		t.Fatal(err)
	}
	worker, err := Database(ctx, c.Workers[0], name)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, worker)
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{`BEGIN`, `CREATE TABLE half (id int)`, `PREPARE TRANSACTION 'pglocal_test_half'`} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	conn.Close(ctx)

	if err := c.DropDatabase(ctx, name); err != nil {
		t.Fatalf("drop a database with a prepared transaction: %v", err)
	}
	for _, node := range c.nodes() {
		server, err := pgx.Connect(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		var databases, prepared int
		err = server.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_database WHERE datname = $1),
		        (SELECT count(*) FROM pg_prepared_xacts WHERE database = $1)`, name).Scan(&databases, &prepared)
		server.Close(ctx)
		if err != nil || databases != 0 || prepared != 0 {
			t.Errorf("%s: %d databases and %d prepared transactions named %s left (%v)", node, databases, prepared, name, err)
		}
	}
}
