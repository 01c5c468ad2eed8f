package db

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceledger/onceledger/internal/tracing"
)

// WithTracing traces every statement the pool's connections run, alone or in a batch, through tr
// (tracing.Tracing.Statement: a span named by the sqlc query, never its arguments). Nil, tracing off,
// leaves the pool without a tracer: pgx then does no tracing work at all.
func WithTracing(tr *tracing.Tracing) Option {
	return func(cfg *poolConfig) {
		if tr != nil {
			cfg.ConnConfig.Tracer = statementTracer{tr}
		}
	}
}

// statementTracer is pgx's QueryTracer and BatchTracer: the span each start begins rides in the
// context pgx hands to the matching end.
type statementTracer struct{ tr *tracing.Tracing }

func (s statementTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	ctx, _ = s.tr.Statement(ctx, data.SQL, time.Time{})
	return ctx
}

func (s statementTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	tracing.EndStatement(trace.SpanFromContext(ctx), data.Err)
}

func (s statementTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	ctx, _ = s.tr.Batch(ctx, data.Batch.Len())
	return ctx
}

// TraceBatchQuery is called once a statement's result was read: its span runs from when pgx began
// reading it, so that it is the statement's own wait, not that of the ones before it.
func (s statementTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	_, span := s.tr.Statement(ctx, data.SQL, data.ReadStartTime)
	tracing.EndStatement(span, data.Err)
}

func (s statementTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	tracing.EndStatement(trace.SpanFromContext(ctx), data.Err)
}
