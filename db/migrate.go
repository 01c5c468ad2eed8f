package db

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib" // the database/sql driver the migrations run on
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/onceledger/onceledger/sql/migrations"
)

// Migrations runs the embedded schema migrations against one database, and after them River's (the
// job queue that carries notifications, whose tables live in the same database). Close it when done:
// an open instance keeps a connection, which blocks using the database as a template.
type Migrations struct {
	m    *migrate.Migrate
	db   *sql.DB
	url  string
	conn *pgx.ConnConfig // the URL without its pool_* parameters, for the distribute step's own connection
}

// OpenMigrations prepares the embedded migrations for the database at databaseURL.
func OpenMigrations(databaseURL string) (*Migrations, error) {
	// Parsed as the pool parses it, so that its pool_* parameters are taken out of the URL: handed to
	// database/sql as they are, they would reach PostgreSQL as unknown settings and refuse the connection.
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	sqlDB := stdlib.OpenDB(*cfg.ConnConfig)
	m, err := newMigrate(sqlDB)
	if err != nil {
		_ = sqlDB.Close()
		return nil, err
	}
	return &Migrations{m: m, db: sqlDB, url: databaseURL, conn: cfg.ConnConfig}, nil
}

func newMigrate(sqlDB *sql.DB) (*migrate.Migrate, error) {
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	driver, err := migratepgx.WithInstance(sqlDB, &migratepgx.Config{})
	if err != nil {
		return nil, fmt.Errorf("prepare migrations: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", statementwise{Driver: driver, db: sqlDB})
	if err != nil {
		return nil, fmt.Errorf("prepare migrations: %w", err)
	}
	return m, nil
}

// statementwise runs a migration file as the driver does (one command, one implicit transaction) until
// the database is distributed; then one statement at a time, in one transaction. Citus hands a DDL
// statement's text on to the workers, which take one statement per command: the whole file as one
// command would reach them as several and be refused, so a cluster could not be upgraded.
type statementwise struct {
	database.Driver
	db *sql.DB
}

func (s statementwise) Run(migration io.Reader) error {
	body, err := io.ReadAll(migration)
	if err != nil {
		return fmt.Errorf("read migration: %w", err)
	}
	ctx := context.Background()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("run migration: %w", err)
	}
	defer conn.Close()
	return conn.Raw(func(driverConn any) error {
		c := driverConn.(*stdlib.Conn).Conn()
		distributed, err := Distributed(ctx, c)
		if err != nil {
			return err
		}
		if !distributed {
			return s.Driver.Run(bytes.NewReader(body))
		}
		return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			// DDL on distributed tables, then functions and triggers, in one transaction: Citus runs
			// such a mix only over one connection per node.
			stmts := append([]string{"SET LOCAL citus.multi_shard_modify_mode TO 'sequential'"}, statements(string(body))...)
			for _, stmt := range stmts {
				if _, err := tx.Conn().PgConn().Exec(ctx, stmt).ReadAll(); err != nil {
					return fmt.Errorf("migration: %w\n%.200s", MapError(err), stmt)
				}
			}
			return nil
		})
	})
}

// Up applies every migration not yet applied: ours, then on a database with the citus extension the
// distribute step (citus.go), then River's. Already current is not an error.
func (ms *Migrations) Up() error {
	if err := ms.checkBaseline(); err != nil {
		return err
	}
	if err := ms.m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate up: %w", err)
	}
	if err := distribute(context.Background(), ms.conn); err != nil {
		return err
	}
	return ms.withRiver(func(ctx context.Context, rm *rivermigrate.Migrator[pgx.Tx]) error {
		if _, err := rm.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
			return fmt.Errorf("migrate up river's job queue: %w", err)
		}
		return nil
	})
}

// RiverVersion is the highest River migration applied (0 when none).
func (ms *Migrations) RiverVersion() (int, error) {
	var version int
	err := ms.withRiver(func(ctx context.Context, rm *rivermigrate.Migrator[pgx.Tx]) error {
		applied, err := rm.ExistingVersions(ctx)
		if err != nil {
			return fmt.Errorf("read river's migration version: %w", err)
		}
		if len(applied) > 0 {
			version = applied[len(applied)-1].Version
		}
		return nil
	})
	return version, err
}

// withRiver runs fn with River's migrator on a pool of its own (River's migrator speaks pgx, ours
// database/sql), closed before returning.
func (ms *Migrations) withRiver(fn func(context.Context, *rivermigrate.Migrator[pgx.Tx]) error) error {
	ctx := context.Background()
	pool, err := Open(ctx, ms.url)
	if err != nil {
		return err
	}
	defer pool.Close()
	rm, err := NewRiverMigrator(pool)
	if err != nil {
		return err
	}
	return fn(ctx, rm)
}

// NewRiverMigrator returns River's migrator for its job tables in pool's database. Its warnings are
// dropped: every failure comes back as an error.
func NewRiverMigrator(pool *pgxpool.Pool) (*rivermigrate.Migrator[pgx.Tx], error) {
	rm, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, fmt.Errorf("prepare river's migrations: %w", err)
	}
	return rm, nil
}

// CheckRiverTables refuses a database whose River tables are missing or behind, before a River client
// starts working jobs on it.
func CheckRiverTables(ctx context.Context, pool *pgxpool.Pool) error {
	rm, err := NewRiverMigrator(pool)
	if err != nil {
		return err
	}
	res, err := rm.Validate(ctx, nil)
	if err != nil {
		return fmt.Errorf("check river's tables: %w", err)
	}
	if !res.OK {
		return fmt.Errorf("river's tables are not current (run `onceledger migrate up`): %s", strings.Join(res.Messages, "; "))
	}
	return nil
}

// Down reverts the last n of our migrations. River's tables are left as they are: they hold only
// notification jobs, and River's own tooling migrates them down.
func (ms *Migrations) Down(n int) error {
	if n <= 0 {
		return fmt.Errorf("migrate down: need a positive number of steps, got %d", n)
	}
	if err := ms.checkBaseline(); err != nil {
		return err
	}
	if err := ms.checkBaselineDown(n); err != nil {
		return err
	}
	if err := ms.m.Steps(-n); err != nil {
		return fmt.Errorf("migrate down %d: %w", n, err)
	}
	return nil
}

// Version is the applied version (0 when none) and whether a migration failed half-way (dirty).
func (ms *Migrations) Version() (version uint, dirty bool, err error) {
	version, dirty, err = ms.m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, nil
	}
	return version, dirty, err
}

// Close releases the connection.
func (ms *Migrations) Close() error {
	srcErr, dbErr := ms.m.Close()
	return errors.Join(srcErr, dbErr, ms.db.Close())
}

// LatestMigration is the highest version among the embedded migrations.
func LatestMigration() (uint, error) {
	versions, err := embeddedVersions()
	if err != nil {
		return 0, err
	}
	return versions[len(versions)-1], nil
}

// Baseline is the version of the first embedded migration, 000031_baseline, which creates the schema
// that versions 1 to 31 built one after the other (TestEmbeddedMigrationsStartAtTheBaseline).
const Baseline uint = 31

// ErrBeforeBaseline: the database's schema is at a version the baseline folded in, so this binary has
// no step from it.
var ErrBeforeBaseline = errors.New("schema is older than this binary's baseline")

// checkBaseline refuses a database at a version below the baseline before anything runs: golang-migrate
// would fail on the missing file, saying less.
func (ms *Migrations) checkBaseline() error {
	version, dirty, err := ms.Version()
	if err != nil {
		return err
	}
	if version != 0 && version < Baseline {
		return fmt.Errorf("%w: the database is at %d (dirty=%t) and the baseline at %d; bring it to %d with a "+
			"build of onceledger from before the baseline (docs/operating.md, \"Upgrading from before the baseline\"), "+
			"then run migrate up again", ErrBeforeBaseline, version, dirty, Baseline, Baseline)
	}
	return nil
}

// ErrSchemaNotEmpty: migrate down would undo the baseline, which drops every table, and a table holds
// rows. The baseline's down file refuses as well; checked here first, golang-migrate would otherwise
// leave the refused step marked dirty.
var ErrSchemaNotEmpty = errors.New("migrate down past the baseline drops every table, and the schema holds rows: drop the database instead")

// checkBaselineDown refuses n steps down when there are not that many applied, and when they reach the
// baseline while any of our tables holds a row. A dirty database is left to golang-migrate, which
// refuses it as such.
func (ms *Migrations) checkBaselineDown(n int) error {
	version, dirty, err := ms.Version()
	if err != nil || dirty {
		return err
	}
	versions, err := embeddedVersions()
	if err != nil {
		return err
	}
	applied := 0 // the steps down to nothing: every embedded version applied so far
	for _, v := range versions {
		if v <= version {
			applied++
		}
	}
	if n > applied {
		return fmt.Errorf("migrate down %d: only %d applied", n, applied)
	}
	if n < applied {
		return nil
	}
	rows, err := ms.db.Query(`SELECT c.relname FROM pg_class c
		WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')
		  AND c.relname NOT LIKE 'river\_%' AND c.relname <> 'schema_migrations'
		  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')
		ORDER BY c.relname`)
	if err != nil {
		return fmt.Errorf("migrate down: list the tables: %w", MapError(err))
	}
	var tables []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return err
		}
		tables = append(tables, t)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, t := range tables {
		var held bool
		if err := ms.db.QueryRow(`SELECT EXISTS (SELECT 1 FROM ` + pgx.Identifier{t}.Sanitize() + `)`).Scan(&held); err != nil {
			return fmt.Errorf("migrate down: look for rows in %s: %w", t, MapError(err))
		}
		if held {
			return fmt.Errorf("migrate down %d: %w (%s has rows)", n, ErrSchemaNotEmpty, t)
		}
	}
	return nil
}

// embeddedVersions lists the embedded migrations' versions in order (never empty).
func embeddedVersions() ([]uint, error) {
	names, err := fs.Glob(migrations.FS, "*.up.sql")
	if err != nil {
		return nil, err
	}
	versions := make([]uint, 0, len(names))
	for _, name := range names {
		prefix, _, _ := strings.Cut(name, "_")
		v, err := strconv.ParseUint(prefix, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("migration %s: version is not a number", name)
		}
		versions = append(versions, uint(v))
	}
	if len(versions) == 0 {
		return nil, errors.New("no migration embedded")
	}
	slices.Sort(versions)
	return versions, nil
}

// ErrSchemaNotCurrent: the database's schema is older or newer than this binary's, or a migration
// stopped half-way.
var ErrSchemaNotCurrent = errors.New("schema is not at this binary's migration version")

// CheckSchema returns nil when the database answers and its schema is exactly at LatestMigration.
func CheckSchema(ctx context.Context, pool *pgxpool.Pool) error {
	latest, err := LatestMigration()
	if err != nil {
		return err
	}
	var (
		version int64
		dirty   bool
	)
	err = pool.QueryRow(ctx, `SELECT version, dirty FROM schema_migrations`).Scan(&version, &dirty)
	if err != nil {
		if isNoRows(err) || isUndefinedTable(err) {
			return fmt.Errorf("%w: no migration applied, want %d", ErrSchemaNotCurrent, latest)
		}
		return fmt.Errorf("read schema version: %w", MapError(err))
	}
	if dirty || uint(version) != latest {
		return fmt.Errorf("%w: database at %d (dirty=%t), binary at %d", ErrSchemaNotCurrent, version, dirty, latest)
	}
	return nil
}
