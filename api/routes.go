package api

import (
	"net/http"
	"slices"
	"strings"

	"github.com/onceledger/onceledger/internal/metrics"
)

// routes is the one place that lists every route.
func routes(d Deps) http.Handler {
	r := newRouter(d.Metrics)
	v1 := requireAPIKey(d.Config.APIKeys)

	r.handle(http.MethodGet, "/healthz", handleHealthz())
	r.handle(http.MethodGet, "/readyz", handleReadyz(d))
	r.handle(http.MethodGet, "/metrics", d.Metrics.Handler())
	r.handle(http.MethodPost, "/webhooks/stripe", handleStripeWebhook(d))
	r.handle(http.MethodGet, "/openapi.yaml", handleOpenAPI())
	r.prefix("/console", handleConsole(d))

	r.handle(http.MethodPut, "/v1/accounts/{id}", v1(handlePutAccount(d)))
	r.handle(http.MethodGet, "/v1/accounts/{id}", v1(handleGetAccount(d)))
	r.handle(http.MethodGet, "/v1/accounts/{id}/entries", v1(handleListEntries(d)))
	r.handle(http.MethodGet, "/v1/accounts/{id}/balance", v1(handleGetBalanceAt(d)))
	r.handle(http.MethodGet, "/v1/accounts/{id}/statement", v1(handleGetStatement(d)))
	r.handle(http.MethodPost, "/v1/accounts/{id}/adjustments", v1(handlePostAdjustment(d)))
	r.handle(http.MethodPost, "/v1/accounts/{id}/topups", v1(handlePostTopup(d)))
	r.handle(http.MethodPut, "/v1/accounts/{id}/recharge", v1(handlePutRecharge(d)))
	r.handle(http.MethodPut, "/v1/accounts/{id}/alerts", v1(handlePutAlerts(d)))
	r.handle(http.MethodPost, "/v1/accounts/{id}/holds", v1(handlePostHold(d)))
	r.handle(http.MethodGet, "/v1/accounts/{id}/holds/{hold_id}", v1(handleGetHold(d)))
	r.handle(http.MethodPost, "/v1/accounts/{id}/holds/{hold_id}/capture", v1(handleCaptureHold(d)))
	r.handle(http.MethodPost, "/v1/accounts/{id}/holds/{hold_id}/void", v1(handleVoidHold(d)))
	r.handle(http.MethodGet, "/v1/accounts/{id}/lots", v1(handleListLots(d)))
	r.handle(http.MethodPost, "/v1/lots/{id}/void", v1(handleVoidLot(d)))
	r.handle(http.MethodGet, "/v1/topups/{id}", v1(handleGetTopup(d)))
	r.handle(http.MethodPost, "/v1/decisions", v1(handlePostDecisions(d)))
	r.handle(http.MethodGet, "/v1/stripe/events", v1(handleListStripeEvents(d)))
	r.handle(http.MethodGet, "/v1/reports/stripe-drift", v1(handleGetStripeDrift(d)))

	return r.done()
}

// router registers routes on the standard library's ServeMux, whose patterns match a path segment by
// segment, not a regular expression per route in turn. Each route is timed by the metrics under its
// pattern (not its path, which would explode the label set with ids); a request no route takes (404)
// or a route takes with other methods only (405) is answered in JSON and not timed, its path and
// method being the caller's to choose.
type router struct {
	mux     *http.ServeMux
	metrics *metrics.Metrics
	// methods lists each routed path's methods, in registration order, for its 405's Allow.
	methods map[string][]string
	// endpoints are "METHOD /path" of every route with a method, as the API's document lists them.
	endpoints []string
}

func newRouter(m *metrics.Metrics) *router {
	return &router{mux: http.NewServeMux(), metrics: m, methods: map[string][]string{}}
}

// handle routes method on path (a GET route takes HEAD too, as ServeMux does).
func (r *router) handle(method, path string, h http.Handler) {
	r.mux.Handle(method+" "+path, r.metrics.Timed(path, h))
	r.methods[path] = append(r.methods[path], method)
	r.endpoints = append(r.endpoints, method+" "+path)
}

// prefix routes path and everything under it, whatever the method, to h.
func (r *router) prefix(path string, h http.Handler) {
	timed := r.metrics.Timed(path, h)
	r.mux.Handle(path, timed)
	r.mux.Handle(path+"/", timed)
}

// done adds the refusals: a routed path with another method is 405 with its Allow header (a pattern
// without a method is less specific than the same with one, so it takes only the other methods), and
// any other request is 404 ("/" matches every path no other pattern does).
func (r *router) done() http.Handler {
	for path, methods := range r.methods {
		allow := slices.Clone(methods)
		if slices.Contains(allow, http.MethodGet) {
			allow = append(allow, http.MethodHead)
		}
		r.mux.Handle(path, handleMethodNotAllowed(strings.Join(allow, ", ")))
	}
	r.mux.Handle("/", handleNotFound())
	return r
}

func (r *router) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mux.ServeHTTP(w, req)
}
