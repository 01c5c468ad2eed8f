package reconcile_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/reconcile"
)

// benchDecisions is the size of the billing run every benchmark measures.
const benchDecisions = 1_000_000

// Billing rate of a first pass over 1,000,000 decisions, through the reconciler and through the
// baseline (the same billing SQL from sql/queries, executed directly through pgx), over 1,000
// accounts and over one.
func BenchmarkBilling(b *testing.B) {
	for _, accounts := range []int{1000, 1} {
		for _, bill := range billers {
			b.Run(fmt.Sprintf("accounts=%d/%s", accounts, bill.name), func(b *testing.B) {
				benchmarkPass(b, accounts, bill.run, false)
			})
		}
	}
}

// Re-read rate: a second full pass over the same 1,000,000 decisions, all billed already.
func BenchmarkReread(b *testing.B) {
	for _, accounts := range []int{1000, 1} {
		for _, bill := range billers {
			b.Run(fmt.Sprintf("accounts=%d/%s", accounts, bill.name), func(b *testing.B) {
				benchmarkPass(b, accounts, bill.run, true)
			})
		}
	}
}

type biller struct {
	name string
	run  func(tb testing.TB, pool *pgxpool.Pool) (billed int64)
}

var billers = []biller{
	{"reconciler", func(tb testing.TB, pool *pgxpool.Pool) int64 {
		rep, err := reconcile.New(reconcile.Deps{Pool: pool, Ledger: dbtest.Ledger(tb, pool)}, reconcile.Options{}).Bill(context.Background(), 0)
		if err != nil {
			tb.Fatal(err)
		}
		return rep.Billed
	}},
	{"baseline", billDirectly},
}

// benchmarkPass times one full billing pass per iteration over a fresh database of benchDecisions
// decisions (billed once beforehand, untimed, when reread), and reports decisions/s.
func benchmarkPass(b *testing.B, accounts int, bill func(testing.TB, *pgxpool.Pool) int64, reread bool) {
	wantBilled := int64(benchDecisions)
	if reread {
		wantBilled = 0
	}
	for range b.N {
		b.StopTimer()
		pool := dbtest.New(b)
		seedAccounts(b, pool, accounts)
		seedDecisions(b, pool, 1, benchDecisions, accounts)
		if _, err := pool.Exec(context.Background(), `VACUUM ANALYZE decisions`); err != nil {
			b.Fatal(err)
		}
		if reread {
			bill(b, pool)
		}
		b.StartTimer()
		if billed := bill(b, pool); billed != wantBilled {
			b.Fatalf("billed %d, want %d", billed, wantBilled)
		}
		b.StopTimer()
		pool.Close()
	}
	b.ReportMetric(float64(benchDecisions*b.N)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(0, "ns/op")
}

// billDirectly is the baseline: the reconciler's chunk loop with the billing statements of
// sql/queries run through pgx as written, with no layer between.
func billDirectly(tb testing.TB, pool *pgxpool.Pool) int64 {
	ctx := context.Background()
	q := billingQueries(tb)
	var lastSeq, billed int64
	if err := pool.QueryRow(ctx, q["DecisionsLastSeq"]).Scan(&lastSeq); err != nil {
		tb.Fatal(err)
	}
	for after := int64(0); after < lastSeq; {
		var upto, read int64
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, q["DecisionsChunkEnd"],
				pgx.NamedArgs{"after_seq": after, "last_seq": lastSeq, "chunk_size": 10_000}).Scan(&upto, &read); err != nil || read == 0 {
				return err
			}
			unbilled, err := pgx.CollectRows(mustQuery(tx.Query(ctx, q["DecisionsUnbilledByAccount"], pgx.NamedArgs{"after_seq": after, "upto_seq": upto})),
				func(row pgx.CollectableRow) (string, error) {
					var account string
					var n, first int64
					return account, row.Scan(&account, &n, &first)
				})
			if err != nil || len(unbilled) == 0 {
				return err
			}
			type lockedAccount struct {
				id                     string
				lastSeq, balance, held int64
			}
			lockedRows, err := pgx.CollectRows(mustQuery(tx.Query(ctx, q["AccountsLock"], pgx.NamedArgs{"ids": unbilled})),
				func(row pgx.CollectableRow) (a lockedAccount, err error) {
					return a, row.Scan(&a.id, &a.lastSeq, &a.balance, &a.held)
				})
			if err != nil {
				return err
			}
			// The bench's accounts are roots: each is its own tree, as the reconciler describes it.
			var locked, parents []string
			var depths []int32
			var available []int64
			for _, a := range lockedRows {
				locked, parents = append(locked, a.id), append(parents, "")
				depths, available = append(depths, 0), append(available, a.balance-a.held)
			}
			// Planned for each chunk's values, as the reconciler runs it (db.plannedForItsValues).
			rows, err := tx.Query(ctx, q["LedgerAppendForDecisions"], pgx.QueryExecModeExec, pgx.NamedArgs{
				"after_seq": after, "upto_seq": upto, "account_ids": locked,
				"tree_ids": locked, "tree_parents": parents, "tree_depths": depths, "tree_available": available,
			})
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				billed++
			}
			return rows.Err()
		})
		if err != nil {
			tb.Fatal(err)
		}
		if read == 0 {
			break
		}
		after = upto
	}
	return billed
}

// mustQuery lets a query's error surface through pgx.CollectRows, which reports rows.Err().
func mustQuery(rows pgx.Rows, err error) pgx.Rows {
	if err != nil {
		panic(err)
	}
	return rows
}

// billingQueries reads sql/queries and returns each query by name, as written: pgx binds its @named
// parameters itself (pgx.NamedArgs).
func billingQueries(tb testing.TB) map[string]string {
	tb.Helper()
	files, err := filepath.Glob("../../sql/queries/*.sql")
	if err != nil {
		tb.Fatal(err)
	}
	queries := map[string]string{}
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			tb.Fatal(err)
		}
		for _, part := range strings.Split(string(text), "-- name: ")[1:] {
			name, body, _ := strings.Cut(part, " ")
			queries[name] = body[strings.Index(body, "\n"):]
		}
	}
	return queries
}
