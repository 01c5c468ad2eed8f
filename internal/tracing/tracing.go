// Package tracing is onceledger's OpenTelemetry traces: the tracer provider serve starts from the
// standard OTEL_ variables (config.Tracing), and every kind of span the service makes: a route's
// request (http.go), a SQL statement (sql.go, called by db.WithTracing's tracer), a Stripe API call
// (stripe.go), a River job (jobs.go), a step of the webhook's processing and a group commit (here).
// Tracing off is a nil *Tracing, whose methods hand back what they are given: nothing is installed,
// and the request path pays nothing for tracing, not even an allocation. No span carries a secret or
// a value of the money: SQL arguments, request bodies, ids in paths and error messages are never
// recorded.
package tracing

import (
	"context"
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceledger/onceledger/internal/config"
)

// instrumentation names onceledger's own spans (the steps, SQL, Stripe calls) to the provider.
const instrumentation = "github.com/onceledger/onceledger"

// Tracing makes the service's spans on one tracer provider; nil is off.
type Tracing struct {
	provider trace.TracerProvider
	tracer   trace.Tracer
}

// New traces on provider: what Start builds, or a test's provider with an in-memory exporter.
func New(provider trace.TracerProvider) *Tracing {
	return &Tracing{provider: provider, tracer: provider.Tracer(instrumentation)}
}

// Start builds the tracer provider cfg asks for: spans batched to an OTLP/HTTP exporter at
// cfg.Endpoint, sampled as cfg says, under the service's name and version. With no endpoint it
// starts nothing and returns nil (off). shutdown sends the spans still batched and stops the
// exporter; it is to run last, once the server drained and the jobs stopped. A collector that cannot
// be reached costs spans, never requests: the exporter's failures are logged.
func Start(ctx context.Context, cfg config.Tracing, version string, log *slog.Logger) (t *Tracing, shutdown func(context.Context) error, err error) {
	if cfg.Endpoint == "" {
		return nil, func(context.Context) error { return nil }, nil
	}
	// OpenTelemetry reports an export that failed through its one global handler.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing", "error", err.Error())
	}))
	exporter, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(cfg.Endpoint))
	if err != nil {
		return nil, nil, fmt.Errorf("trace exporter for %s: %w", cfg.Endpoint, err)
	}
	sampler := sdktrace.TraceIDRatioBased(cfg.Ratio)
	if cfg.ParentBased {
		sampler = sdktrace.ParentBased(sampler)
	}
	provider := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exporter),
		sdktrace.WithSampler(sampler),
		sdktrace.WithResource(resource.NewSchemaless(
			attribute.String("service.name", cfg.ServiceName), attribute.String("service.version", version),
		)),
	)
	log.Info("tracing", "endpoint", cfg.Endpoint, "service", cfg.ServiceName)
	return New(provider), provider.Shutdown, nil
}

// noSpan is what Start and Group hand back when tracing is off: one shared span that records
// nothing, so that ending it or asking IsRecording costs nothing.
var noSpan = trace.SpanFromContext(context.Background())

// Start begins the span of a step (a webhook's verification, its record, its effect) as a child of
// ctx's span. Attributes are for a recording span only: set them under span.IsRecording().
func (t *Tracing) Start(ctx context.Context, name string) (context.Context, trace.Span) {
	if t == nil {
		return ctx, noSpan
	}
	return t.tracer.Start(ctx, name)
}

// Group begins the span of a group commit on ctx (the group's own, which no member's may cancel):
// the transaction that n requests share. Its statements are its children. A group of one is its
// member's child; a larger one is a root linked to the span of each member (member(i) is the i-th
// member's context), so that each request's trace leads to the commit that answered it. A group none
// of whose members is traced makes no span, as a statement outside a traced request makes none.
func (t *Tracing) Group(ctx context.Context, name string, n int, member func(i int) context.Context) (context.Context, trace.Span) {
	if t == nil {
		return ctx, noSpan
	}
	var links []trace.Link
	for i := range n {
		if sc := trace.SpanContextFromContext(member(i)); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	size := trace.WithAttributes(attribute.Int("onceledger.group.size", n))
	switch {
	case len(links) == 0:
		return ctx, noSpan
	case n == 1:
		return t.tracer.Start(trace.ContextWithSpanContext(ctx, links[0].SpanContext), name, size)
	}
	return t.tracer.Start(ctx, name, trace.WithNewRoot(), trace.WithLinks(links...), size)
}
