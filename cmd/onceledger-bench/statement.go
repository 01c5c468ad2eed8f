package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
)

// statementAccount holds the entries the statement workload reads.
const statementAccount = "bench_statement"

// statement times one statement of n entries of one account (SPEC §10), as JSON and as CSV, read whole
// over loopback, next to the server's resident set: a streamed statement leaves the peak where it was.
// The entries are inserted straight in SQL, chained (ledger_chain checks them), in one statement.
func (b *bench) statement(ctx context.Context, srv *server) {
	n := 1_000_000
	if b.o.quick {
		n = 10_000
	}
	label := fmt.Sprintf("statement, %d entries", n)
	fail := func(err error) {
		b.rows = append(b.rows, row{result: result{workload: label, errors: 1, firstErr: err.Error()}})
	}
	_, err := b.pool.Exec(ctx, `INSERT INTO accounts (id, currency) VALUES ($1, 'usd')`, statementAccount)
	if err == nil {
		_, err = b.pool.Exec(ctx, `
			INSERT INTO ledger (account_id, kind, amount, description, seq, balance_after)
			SELECT $1, 'adjustment', 1, 'bench statement', k, k FROM generate_series(1, $2::bigint) AS k`,
			statementAccount, n)
	}
	if err != nil {
		fail(fmt.Errorf("seed %d entries: %w", n, err))
		return
	}
	// The baseline: the same reads through pgx (db.StatementBounds, db.StatementEntries), no HTTP.
	start := time.Now()
	read, err := readStatementDirect(ctx, b.pool, n)
	if err != nil {
		fail(err)
		return
	}
	elapsed := time.Since(start)
	base := result{workload: label + ", direct SQL", concurrency: 1, ops: 1, elapsed: elapsed, p50: elapsed, p99: elapsed,
		rate: float64(read) / elapsed.Seconds()}
	b.add(base, nil)
	// A statement may take longer than the client's usual timeout: ctx bounds it.
	c := &http.Client{Transport: b.http.http.Transport}
	for _, format := range []string{"json", "csv"} {
		before, beforeErr := srv.statusKB("VmHWM")
		start := time.Now()
		lines, err := b.fetchStatement(ctx, c, format)
		elapsed := time.Since(start)
		after, afterErr := srv.statusKB("VmHWM")
		if err == nil && format == "csv" && lines != n+1 {
			err = fmt.Errorf("CSV statement has %d lines, want %d", lines, n+1)
		}
		if err != nil {
			fail(err)
			continue
		}
		b.rows = append(b.rows, row{
			baseline: &base,
			result: result{workload: label + ", " + format, concurrency: 1, ops: 1, elapsed: elapsed, p50: elapsed, p99: elapsed,
				rate: float64(n) / elapsed.Seconds()},
			note: fmt.Sprintf("ops/s is entries/s; server RSS peak (VmHWM) %s before, %s after",
				mib(before, beforeErr), mib(after, afterErr)),
		})
	}
}

// readStatementDirect reads the whole statement of statementAccount through the db package and
// returns how many entries it held.
func readStatementDirect(ctx context.Context, pool *pgxpool.Pool, want int) (int, error) {
	bounds, err := db.StatementBounds(ctx, pool, statementAccount, time.Unix(0, 0), time.Now().Add(time.Hour))
	if err != nil {
		return 0, err
	}
	read := 0
	err = db.StatementEntries(ctx, pool, bounds, func(db.Entry) error {
		read++
		return nil
	})
	if err == nil && read != want {
		err = fmt.Errorf("direct statement read %d entries, want %d", read, want)
	}
	return read, err
}

// fetchStatement reads the whole statement of statementAccount in format and counts its lines.
func (b *bench) fetchStatement(ctx context.Context, c *http.Client, format string) (int, error) {
	path := "/v1/accounts/" + statementAccount + "/statement?from=1970-01-01T00:00:00Z&to=" +
		time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + "&format=" + format
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.http.base+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, fmt.Errorf("GET %s = %d %s", path, resp.StatusCode, bytes.TrimSpace(answer))
	}
	lines := 0
	buf := make([]byte, 64<<10)
	for {
		k, err := resp.Body.Read(buf)
		lines += bytes.Count(buf[:k], []byte{'\n'})
		if err == io.EOF {
			return lines, nil
		}
		if err != nil {
			return lines, err
		}
	}
}
