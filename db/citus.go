package db

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/onceledger/onceledger/sql/citus"
)

// Scale-out on Citus (SPEC §15). On a database with the citus extension, `migrate up` runs a distribute
// step after the migrations: sql/citus/prepare.sql (unique keys that include the distribution column, the
// chain and lot triggers' forms that run per statement on the shards, the global dedupe_claims, and the Citus forms of the
// functions the one road calls), every time, since running it again is harmless and gives back the Citus
// forms a later migration would have replaced; then it distributes every table below that exists and is
// not distributed yet. On plain PostgreSQL nothing of this runs.

// accountTables hold an account's data: distributed by account_id, colocated with accounts, so that a
// posting's account row, entries and holds are on one node. A new such table is one more line here.
var accountTables = []string{
	"ledger",
	"decisions",
	"topups",
	"holds",
	"hold_reservations",
	"credit_lots", // before the lot tables whose foreign keys name it
	"lot_draws",
	"lot_refills",
	"lot_debts",
	"recharge_attempts",
	"balance_alerts",
	"recharge_windows",
	"recharge_blocks",
	"recharge_status_changes",
	"stripe_drift",
	"audit_log",
	"spend_limits", // before spend_windows, whose foreign key names it
	"spend_windows",
	"revenue_recognitions",
}

// keyedTables are distributed by a column of their own, not colocated with accounts.
var keyedTables = [][2]string{
	{"stripe_events", "event_id"},
	{"dedupe_claims", "dedupe_key"},
	// Deployment-wide: one row per clean window of the Stripe drift pass, keyed by its window.
	{"stripe_drift_checkpoints", "window_start"},
	// Console sessions belong to no account; each statement names one session.
	{"console_sessions", "id"},
}

// onePerWorker are the tables that get one shard per worker node instead of citus.shard_count: a
// posting's keys (a group's, a billing chunk's) are claimed and read in one statement that runs on
// every shard holding one of them, each worker's shards one after the other, so fewer shards are fewer
// steps on the hot path while every worker still holds a share. Measured on the local cluster, 18 keys
// claimed in a transaction with its account lock: 2.6 ms over two shards, 3.7 ms over eight. A worker
// added later takes shards only when the table is split or rebalanced (docs/scaling.md).
var onePerWorker = map[string]bool{"dedupe_claims": true}

// referenceTables belong to the deployment, not to an account, and hold a few rows written rarely and
// read by every report: Citus keeps a copy of each on every node (create_reference_table), so they need
// no distribution column and their keys and foreign keys hold as on plain PostgreSQL. Closed periods:
// a dozen rows a month, joined by the reports with the account tables on any node (§15's rule, every
// unique key holds the distribution column, is about distributed tables). A table whose foreign key
// names another comes after it.
var referenceTables = []string{
	"revenue_periods",
	"revenue_period_balances",
}

// citusMarker is the table prepare.sql creates: its presence is what makes a database "on Citus"
// (Distributed).
const citusMarker = "dedupe_claims"

// distribute runs the distribute step when the citus extension is present, and does nothing otherwise.
func distribute(ctx context.Context, config *pgx.ConnConfig) error {
	conn, err := pgx.ConnectConfig(ctx, config.Copy())
	if err != nil {
		return fmt.Errorf("distribute: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var hasCitus bool
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')`).Scan(&hasCitus)
	if err != nil || !hasCitus {
		return MapError(err)
	}
	// Triggers on distributed tables run on the shards; Citus asks for this to create them.
	if _, err := conn.Exec(ctx, `SET citus.enable_unsafe_triggers = on`); err != nil {
		return fmt.Errorf("distribute: %w", err)
	}
	// One statement at a time, in one transaction: once the tables are distributed, Citus hands a DDL
	// statement's text on to the workers, which take one statement per command.
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, stmt := range statements(citus.Prepare) {
			if _, err := tx.Conn().PgConn().Exec(ctx, stmt).ReadAll(); err != nil {
				return fmt.Errorf("%w\n%.200s", err, stmt)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("distribute: prepare the schema for Citus: %w", err)
	}
	// Each colocation group its own: "default" would put every table of text keys in one group.
	tables := [][3]string{{"accounts", "id", "none"}}
	for _, t := range accountTables {
		tables = append(tables, [3]string{t, "account_id", "accounts"})
	}
	for _, t := range keyedTables {
		tables = append(tables, [3]string{t[0], t[1], "none"})
	}
	var workers int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_dist_node
	        WHERE noderole = 'primary' AND isactive AND shouldhaveshards AND groupid <> 0`).Scan(&workers)
	if err != nil {
		return fmt.Errorf("distribute: count the workers: %w", MapError(err))
	}
	for _, t := range tables {
		shards := 0
		if onePerWorker[t[0]] {
			shards = max(workers, 1)
		}
		if err := distributeTable(ctx, conn, t[0], t[1], t[2], shards); err != nil {
			return err
		}
	}
	for _, t := range referenceTables {
		if err := distributeTable(ctx, conn, t, "", "", 0); err != nil {
			return err
		}
	}
	if err := restorePeriodsForeignKey(ctx, conn); err != nil {
		return err
	}
	if err := copyColumnOptionsToShards(ctx, conn); err != nil {
		return err
	}
	// Functions left on the coordinator when their migrations ran (the tables were not distributed yet)
	// that triggers on the shards call on the workers: ledger_lots calls lots_apply_entry, and
	// accounts_available_watch moves the recharge status with the shards' names.
	for _, f := range []string{
		"lots_apply_entry(ledger)",
		"recharge_status_compute(text, text, text, text, text)",
		"recharge_status_sync(text, text, text, text, text, text, text)",
	} {
		if _, err := conn.Exec(ctx, `SELECT create_distributed_function($1)`, f); err != nil {
			return fmt.Errorf("distribute %s: %w", f, err)
		}
	}
	return nil
}

// restorePeriodsForeignKey adds back, between the two reference tables, the foreign key prepare.sql
// dropped so that distributing revenue_periods would not turn revenue_period_balances into a Citus local
// table; with the comment the migration gave it. Nothing to do when it is there already.
func restorePeriodsForeignKey(ctx context.Context, conn *pgx.Conn) error {
	var missing bool
	err := conn.QueryRow(ctx, `SELECT to_regclass('revenue_period_balances') IS NOT NULL
	        AND NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'revenue_period_balances_period_fk')`).Scan(&missing)
	if err != nil || !missing {
		return MapError(err)
	}
	for _, stmt := range []string{
		`ALTER TABLE revenue_period_balances ADD CONSTRAINT revenue_period_balances_period_fk
		     FOREIGN KEY (period) REFERENCES revenue_periods (period)`,
		`COMMENT ON CONSTRAINT revenue_period_balances_period_fk ON revenue_period_balances IS
		     'Totals are stored with their closed month, in its transaction.'`,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("restore revenue_period_balances_period_fk: %w", err)
		}
	}
	return nil
}

// copyColumnOptionsToShards gives every shard of a distributed table the planner's column options
// (n_distinct, n_distinct_inherited) its table has on the coordinator, such as the ledger's estimate
// of entries per account (n_distinct on ledger.account_id): PostgreSQL plans a shard's statements on the worker with
// the shard's own options, and Citus gives a new shard its table's columns, storage and statistics
// targets but not these, nor hands an ALTER COLUMN … SET (…) on to the shards. Setting an option
// again is harmless; the step runs on every migrate up.
func copyColumnOptionsToShards(ctx context.Context, conn *pgx.Conn) error {
	// The planner's options only: a server may keep options of its own there (some builds stamp every
	// column), which are not ours to copy.
	rows, err := conn.Query(ctx, `
		SELECT p.logicalrelid::regclass::text, format('ALTER TABLE %%s ALTER COLUMN %I SET (%s)', a.attname, string_agg(o, ', '))
		FROM pg_dist_partition p
		JOIN pg_attribute a ON a.attrelid = p.logicalrelid
		CROSS JOIN unnest(a.attoptions) AS o
		WHERE a.attnum > 0 AND NOT a.attisdropped
		  AND split_part(o, '=', 1) IN ('n_distinct', 'n_distinct_inherited')
		GROUP BY p.logicalrelid, a.attnum, a.attname
		ORDER BY 1, a.attnum`)
	if err != nil {
		return fmt.Errorf("distribute: read column options: %w", err)
	}
	options, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (o [2]string, err error) {
		return o, row.Scan(&o[0], &o[1])
	})
	if err != nil {
		return fmt.Errorf("distribute: read column options: %w", err)
	}
	for _, o := range options {
		// run_command_on_shards answers each shard's failure as a row, not as an error.
		var failed *string
		err := conn.QueryRow(ctx, `SELECT min(result) FROM run_command_on_shards($1::regclass, $2) WHERE NOT success`,
			o[0], o[1]).Scan(&failed)
		if err == nil && failed != nil {
			err = errors.New(*failed)
		}
		if err != nil {
			return fmt.Errorf("distribute: column options of %s's shards: %w", o[0], err)
		}
	}
	return nil
}

// distributeTable distributes one table by column, colocated with the table colocateWith names (or "none")
// and in shards shards (0: citus.shard_count), or with no column makes it a reference table, unless it is
// missing (a later migration adds it) or distributed already.
func distributeTable(ctx context.Context, conn *pgx.Conn, table, column, colocateWith string, shards int) error {
	var todo bool
	err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL
	        AND NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = to_regclass($1))`, table).Scan(&todo)
	if err != nil || !todo {
		return MapError(err)
	}
	switch {
	case column == "":
		_, err = conn.Exec(ctx, `SELECT create_reference_table($1)`, table)
	case shards > 0:
		_, err = conn.Exec(ctx, `SELECT create_distributed_table($1, $2, colocate_with => $3, shard_count => $4)`,
			table, column, colocateWith, shards)
	default:
		_, err = conn.Exec(ctx, `SELECT create_distributed_table($1, $2, colocate_with => $3)`, table, column, colocateWith)
	}
	if err != nil {
		return fmt.Errorf("distribute %s by %s: %w", table, column, err)
	}
	return nil
}

// Distributed reports whether q's database was distributed by the distribute step (its marker table
// exists). Only the migrations ask it (a distributed database runs each migration a statement at a
// time): what differs on Citus lives in the database itself (the functions sql/citus gives their Citus
// form).
func Distributed(ctx context.Context, q Conn) (bool, error) {
	var distributed bool
	if err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, citusMarker).Scan(&distributed); err != nil {
		return false, fmt.Errorf("look for Citus: %w", MapError(err))
	}
	return distributed, nil
}

var (
	// citusDetail is the detail our trigger functions add on Citus (sql/citus/prepare.sql).
	citusDetail = regexp.MustCompile(`^constraint (\w+) on table (\w+)$`)
	// citusViolation finds the constraint in PostgreSQL's own message for a check, foreign-key or unique
	// violation, its name carrying the shard's suffix when Citus created it per shard.
	citusViolation = regexp.MustCompile(`violates (?:check|foreign key|unique) constraint "(\w+?)(?:_\d+)?"$`)
)

// constraintOf is the (table, constraint) a violation names. Citus relays an error raised on a shard
// without those two fields; the constraint is then read from the detail our triggers set, or from
// PostgreSQL's message, and the table is the one constraintErrors knows it on.
func constraintOf(pgErr *pgconn.PgError) [2]string {
	if pgErr.ConstraintName != "" {
		return [2]string{pgErr.TableName, pgErr.ConstraintName}
	}
	if m := citusDetail.FindStringSubmatch(pgErr.Detail); m != nil {
		return [2]string{m[2], m[1]}
	}
	if m := citusViolation.FindStringSubmatch(pgErr.Message); m != nil {
		for key := range constraintErrors {
			if key[1] == m[1] {
				return key
			}
		}
	}
	return [2]string{}
}

// statements splits a SQL file into its statements: at each semicolon outside a quoted string, a quoted
// identifier, a dollar-quoted body and a comment.
func statements(sql string) []string {
	var (
		out   []string
		start int
	)
	for i := 0; i < len(sql); i++ {
		switch c := sql[i]; {
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			if end := strings.IndexByte(sql[i:], '\n'); end >= 0 {
				i += end
			} else {
				i = len(sql)
			}
		case c == '\'' || c == '"':
			if end := strings.IndexByte(sql[i+1:], c); end >= 0 {
				i += end + 1
			}
		case c == '$':
			if tag := dollarTag.FindString(sql[i:]); tag != "" {
				if end := strings.Index(sql[i+len(tag):], tag); end >= 0 {
					i += len(tag) + end + len(tag) - 1
				}
			}
		case c == ';':
			if stmt := strings.TrimSpace(sql[start : i+1]); stmt != ";" {
				out = append(out, stmt)
			}
			start = i + 1
		}
	}
	if rest := strings.TrimSpace(sql[start:]); rest != "" && !onlyComments(rest) {
		out = append(out, rest)
	}
	return out
}

// dollarTag matches the opening of a dollar-quoted string ($$ or $tag$).
var dollarTag = regexp.MustCompile(`^\$[A-Za-z_]*\$`)

// onlyComments reports whether s holds nothing but -- comments.
func onlyComments(s string) bool {
	for _, line := range strings.Split(s, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "--") {
			return false
		}
	}
	return true
}
