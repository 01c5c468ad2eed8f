// Package dbtest gives each test a database of its own: cloned from a template migrated with the
// embedded migrations, so tests can commit, race and run in parallel. The server is TEST_DATABASE_URL
// when set, else the one pglocal finds or starts; with ONCELEDGER_TEST_BACKEND=citus it is the local
// Citus cluster (citus.go), so that the same tests run on either backend. When none can be had the test
// fails, never skips.
package dbtest

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/peterldowns/pgtestdb"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/pglocal"
	"github.com/onceledger/onceledger/sql/migrations"
)

// New returns a pool on a fresh, fully migrated database, closed when the test ends and dropped when
// it passed (kept for inspection when it failed; its URL is logged).
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := db.Open(context.Background(), URL(t))
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Ledger returns the Ledger of pool's database, configured as cfg says (no side effects when empty).
func Ledger(t testing.TB, pool *pgxpool.Pool, cfg ...db.LedgerConfig) *db.Ledger {
	t.Helper()
	var c db.LedgerConfig
	if len(cfg) > 0 {
		c = cfg[0]
	}
	return db.NewLedger(pool, c)
}

// URL returns the URL of a fresh, fully migrated database, for tests that run the binary itself.
func URL(t testing.TB) string {
	t.Helper()
	if OnCitus() {
		return citusURL(t)
	}
	return pgtestdb.Custom(t, serverConfig(t), migrator{}).URL()
}

// EmptyURL returns the URL of a fresh database with nothing in it, on the plain server whatever the
// backend, for tests that build a schema themselves.
func EmptyURL(t testing.TB) string {
	t.Helper()
	return pgtestdb.Custom(t, serverConfig(t), pgtestdb.NoopMigrator{}).URL()
}

var (
	serverOnce sync.Once
	server     pgtestdb.Config
	serverErr  error
)

func serverConfig(t testing.TB) pgtestdb.Config {
	t.Helper()
	serverOnce.Do(func() { server, serverErr = findServer() })
	if serverErr != nil {
		t.Fatalf("dbtest: no PostgreSQL for tests: %v", serverErr)
	}
	return server
}

func findServer() (pgtestdb.Config, error) {
	serverURL := os.Getenv("TEST_DATABASE_URL")
	if serverURL == "" {
		root, err := moduleRoot()
		if err != nil {
			return pgtestdb.Config{}, err
		}
		log := slog.New(slog.NewTextHandler(os.Stderr, nil))
		serverURL, err = pglocal.Server(context.Background(), filepath.Join(root, ".data"), log)
		if err != nil {
			return pgtestdb.Config{}, err
		}
	}
	cfg, err := pgx.ParseConfig(serverURL)
	if err != nil {
		return pgtestdb.Config{}, err
	}
	return pgtestdb.Config{
		DriverName: "pgx",
		Host:       cfg.Host,
		Port:       strconv.Itoa(int(cfg.Port)),
		User:       cfg.User,
		Password:   cfg.Password,
		Database:   cfg.Database,
		Options:    "sslmode=disable",
		// Fault tests kill connections and servers on purpose; leftovers must not fail the drop.
		ForceTerminateConnections: true,
	}, nil
}

// moduleRoot is the folder holding go.mod, where the private cluster's .data folder lives.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}

// migrator builds the template with the same migrations the binary runs: ours, then River's.
type migrator struct{}

// Hash names the template after the migrations' contents, ours and River's, so a changed migration
// or a River upgrade builds a new one.
func (migrator) Hash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(migrations.FS, path)
		h.Write([]byte(path))
		h.Write(body)
		return err
	})
	if err != nil {
		return "", err
	}
	// River lists its migrations without a database.
	rm, err := db.NewRiverMigrator(nil)
	if err != nil {
		return "", err
	}
	for _, m := range rm.AllVersions() {
		fmt.Fprintf(h, "river %d %s\n", m.Version, m.SQLUp)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func (migrator) Migrate(_ context.Context, _ *sql.DB, conf pgtestdb.Config) error {
	ms, err := db.OpenMigrations(conf.URL())
	if err != nil {
		return err
	}
	// Closed before returning: an open connection would stop the template from being cloned.
	defer ms.Close()
	return ms.Up()
}

// LedgerState is everything the ledger of a database says, keyed so that two databases fed the same
// work compare equal: entries by account and seq, lots by the entry that made them, draws and refills
// by the seqs of their entry and lot.
func LedgerState(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []struct{ name, sql string }{
		{"accounts", `SELECT id, balance, last_seq, held FROM accounts ORDER BY id`},
		{"entries", `
			SELECT l.account_id, l.seq, l.kind, l.amount,
			       -- The keys of expiries and voids name lot and entry ids, which each database draws on its own.
			       CASE WHEN l.lot_id IS NULL THEN coalesce(l.dedupe_key, '') ELSE l.kind END,
			       coalesce(l.payment_intent, ''),
			       l.balance_after,
			       coalesce((SELECT c.seq FROM credit_lots cl JOIN ledger c ON c.account_id = cl.account_id AND c.id = cl.entry_id
			                 WHERE cl.id = l.lot_id AND cl.account_id = l.account_id), 0),
			       coalesce((SELECT r.seq FROM ledger r WHERE r.id = l.reverses_entry_id AND r.account_id = l.account_id), 0),
			       coalesce(l.lot_category, ''), coalesce(l.lot_priority, -1),
			       coalesce(l.subject, ''), coalesce(l.feature, '')
			FROM ledger l ORDER BY l.account_id, l.seq`},
		{"lots", `
			SELECT cl.account_id, c.seq, cl.category, cl.priority, cl.amount, cl.remaining, cl.expires_at IS NULL,
			       cl.expires_at <= now(), cl.closed_at IS NULL
			FROM credit_lots cl JOIN ledger c ON c.account_id = cl.account_id AND c.id = cl.entry_id ORDER BY cl.account_id, c.seq`},
		{"draws", `
			SELECT d.account_id, e.seq, c.seq, d.amount
			FROM lot_draws d JOIN ledger e ON e.account_id = d.account_id AND e.id = d.entry_id
			JOIN credit_lots cl ON cl.account_id = d.account_id AND cl.id = d.lot_id
			JOIN ledger c ON c.account_id = d.account_id AND c.id = cl.entry_id ORDER BY 1, 2, 3`},
		{"refills", `
			SELECT f.account_id, e.seq, c.seq, f.amount
			FROM lot_refills f JOIN ledger e ON e.account_id = f.account_id AND e.id = f.entry_id
			JOIN credit_lots cl ON cl.account_id = f.account_id AND cl.id = f.lot_id
			JOIN ledger c ON c.account_id = f.account_id AND c.id = cl.entry_id ORDER BY 1, 2, 3`},
		{"debts", `SELECT x.account_id, e.seq, x.uncovered FROM lot_debts x JOIN ledger e ON e.account_id = x.account_id AND e.id = x.entry_id ORDER BY 1, 2`},
		{"orders", `SELECT id, account_id, coalesce(session_id, ''), coalesce(payment_intent, ''), amount, status,
		                   coalesce(paid_event_id, '') FROM topups ORDER BY id`},
		{"events", `SELECT event_id, outcome, coalesce(parked_reason, '') FROM stripe_events ORDER BY event_id`},
	} {
		rows, err := pool.Query(context.Background(), q.sql)
		if err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		for rows.Next() {
			values, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s %v\n", q.name, values)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// SameLedgers fails with the first line where the two states differ.
func SameLedgers(t testing.TB, general, fast string) {
	t.Helper()
	if line, gl, fl, differ := FirstDifference(general, fast); differ {
		t.Fatalf("the ledgers differ at line %d:\n general: %s\n    fast: %s", line, gl, fl)
	}
}

// FirstDifference finds the first line (from 1) where two texts differ, and that line of each ("" past
// the end of one).
func FirstDifference(a, b string) (line int, la, lb string, differ bool) {
	as, bs := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range max(len(as), len(bs)) {
		la, lb = "", ""
		if i < len(as) {
			la = as[i]
		}
		if i < len(bs) {
			lb = bs[i]
		}
		if la != lb {
			return i + 1, la, lb, true
		}
	}
	return 0, "", "", false
}
