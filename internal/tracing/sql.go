package tracing

import (
	"context"
	"errors"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Statement begins the client span of one SQL statement (the pool's tracer, in package db, calls it
// for each), named by its sqlc query (QueryName), as a child of ctx's span; began, when set, is when
// it started (a batch's statement, timed from when its result was awaited). Only the name is
// recorded, never the SQL's arguments. A statement outside any traced request or job (River polling
// for work, the reconciler's passes) makes no span, and ctx comes back as it was: a trace per poll
// would drown the requests'. End the span with EndStatement.
func (t *Tracing) Statement(ctx context.Context, sql string, began time.Time) (context.Context, trace.Span) {
	if t == nil || !traced(ctx) {
		return ctx, noSpan
	}
	name := QueryName(sql)
	opts := []trace.SpanStartOption{client, trace.WithAttributes(
		attribute.String("db.system.name", "postgresql"),
		attribute.String("db.query.summary", name),
	)}
	if !began.IsZero() {
		opts = append(opts, trace.WithTimestamp(began))
	}
	return t.tracer.Start(ctx, name, opts...)
}

// Batch begins the client span of statements sent in one round trip; each statement's span is its
// child. Like Statement, it makes none outside a traced request or job. End it with EndStatement.
func (t *Tracing) Batch(ctx context.Context, size int) (context.Context, trace.Span) {
	if t == nil || !traced(ctx) {
		return ctx, noSpan
	}
	return t.tracer.Start(ctx, "batch", client, trace.WithAttributes(
		attribute.String("db.system.name", "postgresql"),
		attribute.Int("db.operation.batch.size", size),
	))
}

// EndStatement ends a statement's or batch's span, marked failed by err when it is set: with its
// SQLSTATE (pgconn.PgError's), never its message, which may quote the row that was refused.
func EndStatement(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		var coded interface{ SQLState() string }
		if errors.As(err, &coded) {
			span.SetAttributes(attribute.String("db.response.status_code", coded.SQLState()))
			span.SetStatus(codes.Error, "SQLSTATE "+coded.SQLState())
		} else {
			span.SetStatus(codes.Error, "no answer from the database")
		}
	}
	span.End()
}

// traced reports whether ctx belongs to a traced request or job.
func traced(ctx context.Context) bool { return trace.SpanContextFromContext(ctx).IsValid() }

// client is the kind of every span of the database's, and of the Stripe API's, calls.
var client = trace.WithSpanKind(trace.SpanKindClient)

// QueryName names a statement: its sqlc query's name, which sqlc puts first in the SQL
// ("-- name: LedgerAppend :many"), or else the statement's first word in capitals (BEGIN, COMMIT,
// SET, SELECT), never more of it, since SQL written by hand may hold values.
func QueryName(sql string) string {
	if rest, ok := strings.CutPrefix(sql, "-- name: "); ok {
		if name, _, ok := strings.Cut(rest, " "); ok && name != "" {
			return name
		}
	}
	word := strings.TrimSpace(sql)
	for strings.HasPrefix(word, "--") {
		_, word, _ = strings.Cut(word, "\n")
		word = strings.TrimSpace(word)
	}
	if i := strings.IndexFunc(word, func(r rune) bool { return r == ' ' || r == '\n' || r == '\t' || r == ';' || r == '(' }); i >= 0 {
		word = word[:i]
	}
	if word == "" {
		return "statement"
	}
	return strings.ToUpper(word)
}
