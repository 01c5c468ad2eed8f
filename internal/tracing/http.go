package tracing

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Route traces each request of one route: a server span named by method and pattern (the route as
// api/routes.go registers it), never by the path, which holds ids. The path attribute is the pattern
// too, for the same reason. Off, it is h itself.
func (t *Tracing) Route(method, pattern string, h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	name := method + " " + pattern
	return otelhttp.NewHandler(h, name,
		otelhttp.WithSpanNameFormatter(func(string, *http.Request) string { return name }),
		otelhttp.WithTracerProvider(t.provider),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithPropagators(propagators),
		// After otelhttp's own attributes, so these win over the request's path.
		otelhttp.WithSpanOptions(trace.WithAttributes(
			attribute.String("http.route", pattern), attribute.String("url.path", pattern),
		)),
	)
}

// propagators read a caller's traceparent, so that a request joins the trace of the service that
// sent it (OTEL_TRACES_SAMPLER's parentbased_ samplers then follow its decision).
var propagators = propagation.TraceContext{}
