package tracing

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Stripe wraps the Stripe client's transport (next; nil is http.DefaultTransport): a client span for
// every call, named by method and path with its ids left out ("Stripe GET /v1/refunds",
// "Stripe GET /v1/checkout/sessions/{id}"), with the status and Stripe's Request-Id, which finds the
// call in Stripe's dashboard. The query string, the body and the key are never recorded; nor is a
// failed call's error, whose text holds the URL. Off, it is next itself.
func (t *Tracing) Stripe(next http.RoundTripper) http.RoundTripper {
	if t == nil {
		return next
	}
	if next == nil {
		next = http.DefaultTransport
	}
	return stripeTransport{tracer: t.tracer, next: next}
}

type stripeTransport struct {
	tracer trace.Tracer
	next   http.RoundTripper
}

func (s stripeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !traced(req.Context()) {
		return s.next.RoundTrip(req)
	}
	path := pathTemplate(req.URL.Path)
	ctx, span := s.tracer.Start(req.Context(), "Stripe "+req.Method+" "+path, client, trace.WithAttributes(
		attribute.String("http.request.method", req.Method),
		attribute.String("server.address", req.URL.Hostname()),
		attribute.String("url.template", path),
	))
	defer span.End()
	resp, err := s.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		span.SetStatus(codes.Error, "no answer from Stripe")
		return resp, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if id := resp.Header.Get("Request-Id"); id != "" {
		span.SetAttributes(attribute.String("stripe.request_id", id))
	}
	if resp.StatusCode >= 400 {
		span.SetStatus(codes.Error, resp.Status)
	}
	return resp, nil
}

// pathTemplate is a Stripe API path with every id replaced by {id}: Stripe's resources are named in
// lower case and underscores (/v1/payment_intents), its ids have digits or capitals (pi_3Nx…), and the
// first segment is the API's version.
func pathTemplate(path string) string {
	segments := strings.Split(strings.Trim(path, "/"), "/")
	for i, s := range segments {
		if i > 0 && strings.ContainsFunc(s, func(r rune) bool { return (r < 'a' || r > 'z') && r != '_' }) {
			segments[i] = "{id}"
		}
	}
	return "/" + strings.Join(segments, "/")
}
