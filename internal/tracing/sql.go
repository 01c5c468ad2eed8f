package tracing

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// SQL is the pool's tracer (pgx's QueryTracer and BatchTracer): a client span for every statement,
// named by its sqlc query, and one for every batch, whose statements are its children. Only the name
// is recorded, never the SQL's arguments, and of an error only its SQLSTATE. A statement outside any
// traced request or job (River polling for work, the reconciler's passes) makes no span: a trace per
// poll would drown the requests'. Nil when off, so that the pool has no tracer at all.
func (t *Tracing) SQL() pgx.QueryTracer {
	if t == nil {
		return nil
	}
	return sqlTracer{t.tracer}
}

type sqlTracer struct{ tracer trace.Tracer }

// traced reports whether ctx belongs to a traced request or job.
func traced(ctx context.Context) bool { return trace.SpanContextFromContext(ctx).IsValid() }

func (s sqlTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !traced(ctx) {
		return ctx
	}
	name := QueryName(data.SQL)
	ctx, _ = s.tracer.Start(ctx, name, client, statementSpan(name))
	return ctx
}

func (s sqlTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	if !traced(ctx) {
		return
	}
	span := trace.SpanFromContext(ctx)
	failed(span, data.Err)
	span.End()
}

func (s sqlTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if !traced(ctx) {
		return ctx
	}
	ctx, _ = s.tracer.Start(ctx, "batch", client, trace.WithAttributes(
		attribute.String("db.system.name", "postgresql"),
		attribute.Int("db.operation.batch.size", data.Batch.Len()),
	))
	return ctx
}

// TraceBatchQuery records a statement of the batch once its result was read: from when pgx began
// reading it, so that a statement's span is its own wait, not the ones before it.
func (s sqlTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	if !traced(ctx) {
		return
	}
	name := QueryName(data.SQL)
	_, span := s.tracer.Start(ctx, name, client, statementSpan(name), trace.WithTimestamp(data.ReadStartTime))
	failed(span, data.Err)
	span.End()
}

func (s sqlTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	if !traced(ctx) {
		return
	}
	span := trace.SpanFromContext(ctx)
	failed(span, data.Err)
	span.End()
}

// client is the kind of every span of the database's, and of the Stripe API's, calls.
var client = trace.WithSpanKind(trace.SpanKindClient)

// statementSpan is a statement's attributes: which database and which query, nothing more.
func statementSpan(name string) trace.SpanStartOption {
	return trace.WithAttributes(
		attribute.String("db.system.name", "postgresql"),
		attribute.String("db.query.summary", name),
	)
}

// failed marks span as failed by err, recording its SQLSTATE (pgconn.PgError's) and nothing of its
// message, which may quote the row that was refused.
func failed(span trace.Span, err error) {
	if err == nil {
		return
	}
	var coded interface{ SQLState() string }
	if errors.As(err, &coded) {
		span.SetAttributes(attribute.String("db.response.status_code", coded.SQLState()))
		span.SetStatus(codes.Error, "SQLSTATE "+coded.SQLState())
		return
	}
	span.SetStatus(codes.Error, "no answer from the database")
}

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
