-- name: RevenuePeriodsLock :exec
-- Serialises, until the transaction ends, the transactions that close periods: a close reads the latest
-- closed month and stores the next, so two at once would both see the same latest. A close is one report's
-- aggregation and two inserts, once a month.
-- It also has the transaction read the shards one connection per node: on Citus a transaction that read
-- distributed tables in parallel cannot then write a reference table (revenue_periods). On plain
-- PostgreSQL the setting is an unused placeholder and changes nothing.
SELECT pg_advisory_xact_lock(hashtextextended('onceledger.revenue_periods', 0)),
       set_config('citus.multi_shard_modify_mode', 'sequential', true);

-- name: RevenuePeriodGet :one
-- A closed month's stored report. Returns no row when the month is not closed.
SELECT period, closed_at, report_csv, digest
FROM revenue_periods
WHERE period = @period;

-- name: RevenuePeriodLatest :one
-- The latest closed month, NULL when none is closed.
SELECT max(period)::date AS period
FROM revenue_periods;

-- name: RevenuePeriodInsert :one
-- Closes a month with its report; the database computes the digest of the CSV it stores
-- (revenue_periods_digest_check holds it). Fails on revenue_periods_pkey when the month is closed already
-- (the caller holds RevenuePeriodsLock and has looked first).
INSERT INTO revenue_periods (period, report_csv, digest)
VALUES (@period, @report_csv::text, encode(sha256(convert_to(@report_csv::text, 'UTF8')), 'hex'))
RETURNING period, closed_at, report_csv, digest;

-- name: RevenuePeriodsList :many
-- The closed months, latest first, at most max_rows.
SELECT period, closed_at, digest
FROM revenue_periods
ORDER BY period DESC
LIMIT @max_rows;

-- name: RevenuePeriodBalancesInsert :exec
-- Stores a closed month's cumulative totals, set-based; the arrays are read in lockstep, one element per
-- (currency, measure).
INSERT INTO revenue_period_balances (period, currency, measure, amount, paid_credits, promotional_credits)
SELECT @period, (@currencies::text[])[i], (@measures::text[])[i], (@amounts::bigint[])[i],
       (@paid_credits::bigint[])[i], (@promotional_credits::bigint[])[i]
FROM generate_subscripts(@currencies::text[], 1) AS i;

-- name: RevenuePeriodBalancesOf :many
-- The cumulative totals a closed month stored, per currency and measure.
SELECT currency, measure, amount, paid_credits, promotional_credits
FROM revenue_period_balances
WHERE period = @period
ORDER BY currency, measure;

-- name: RevenuePeriodsClock :one
-- The database's time, which decides whether a month has ended: the same clock that dates the entries.
SELECT now()::timestamptz AS now;
