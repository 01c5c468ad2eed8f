package api

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/gorilla/mux"

	"github.com/onceledger/onceledger/internal/access"
	"github.com/onceledger/onceledger/internal/audit"
	"github.com/onceledger/onceledger/internal/metrics"
	"github.com/onceledger/onceledger/internal/tracing"
)

// routes lists every route of the process, the console's pages too, on one gorilla/mux router. Each
// prefix has its own subrouter, so a request is matched only against its prefix's few routes, in the
// order listed here: the hot ones (postings, holds, the webhook) first.
func routes(d Deps) *mux.Router {
	r := newRouter(d.Metrics, d.Tracing)
	trail := audit.Recorder{Trail: d.Audit, Log: d.Log}
	apiKey := requireAPIKey(d.Config.APIKeys, d.Throttle, trail)

	// The product API: every route behind an API key holding the scope it names (package access).
	v1 := r.prefix("/v1")
	accounts := v1.prefix("/v1/accounts")
	accounts.handle(http.MethodPost, "/v1/accounts/{id}/adjustments", apiKey(access.Credit, handlePostAdjustment(d)))
	accounts.handle(http.MethodPost, "/v1/accounts/{id}/holds", apiKey(access.Spend, handlePostHold(d)))
	accounts.handle(http.MethodPost, "/v1/accounts/{id}/holds/{hold_id}/capture", apiKey(access.Spend, handleCaptureHold(d)))
	accounts.handle(http.MethodPost, "/v1/accounts/{id}/holds/{hold_id}/void", apiKey(access.Spend, handleVoidHold(d)))
	accounts.handle(http.MethodPut, "/v1/accounts/{id}", apiKey(access.Credit, handlePutAccount(d)))
	accounts.handle(http.MethodGet, "/v1/accounts/{id}", apiKey(access.Read, handleGetAccount(d)))
	accounts.handle(http.MethodGet, "/v1/accounts/{id}/entries", apiKey(access.Read, handleListEntries(d)))
	accounts.handle(http.MethodGet, "/v1/accounts/{id}/balance", apiKey(access.Read, handleGetBalanceAt(d)))
	accounts.handle(http.MethodGet, "/v1/accounts/{id}/statement", apiKey(access.Read, handleGetStatement(d)))
	accounts.handle(http.MethodPost, "/v1/accounts/{id}/topups", apiKey(access.Credit, handlePostTopup(d)))
	accounts.handle(http.MethodPut, "/v1/accounts/{id}/recharge", apiKey(access.Credit, handlePutRecharge(d)))
	accounts.handle(http.MethodGet, "/v1/accounts/{id}/recharge", apiKey(access.Read, handleGetRecharge(d)))
	accounts.handle(http.MethodPut, "/v1/accounts/{id}/alerts", apiKey(access.Credit, handlePutAlerts(d)))
	accounts.handle(http.MethodGet, "/v1/accounts/{id}/limits", apiKey(access.Read, handleGetLimits(d)))
	accounts.handle(http.MethodPut, "/v1/accounts/{id}/limits/{limit_id}", apiKey(access.Credit, handlePutLimit(d)))
	accounts.handle(http.MethodDelete, "/v1/accounts/{id}/limits/{limit_id}", apiKey(access.Credit, handleDeleteLimit(d)))
	accounts.handle(http.MethodGet, "/v1/accounts/{id}/holds/{hold_id}", apiKey(access.Read, handleGetHold(d)))
	accounts.handle(http.MethodGet, "/v1/accounts/{id}/lots", apiKey(access.Read, handleListLots(d)))
	accounts.handle(http.MethodGet, "/v1/accounts/{id}/members", apiKey(access.Read, handleGetMembers(d)))
	v1.handle(http.MethodPost, "/v1/decisions", apiKey(access.Spend, handlePostDecisions(d)))
	v1.handle(http.MethodGet, "/v1/topups/{id}", apiKey(access.Read, handleGetTopup(d)))
	v1.handle(http.MethodPost, "/v1/lots/{id}/void", apiKey(access.Operate, handleVoidLot(d)))
	v1.handle(http.MethodGet, "/v1/stripe/events", apiKey(access.Read, handleListStripeEvents(d)))
	v1.handle(http.MethodGet, "/v1/reports/stripe-drift", apiKey(access.Read, handleGetStripeDrift(d)))
	v1.handle(http.MethodGet, "/v1/reports/liability", apiKey(access.Read, handleGetLiability(d)))
	v1.handle(http.MethodGet, "/v1/reports/journal", apiKey(access.Read, handleGetJournal(d)))
	v1.handle(http.MethodGet, "/v1/periods", apiKey(access.Read, handleListPeriods(d)))
	v1.handle(http.MethodPost, "/v1/periods/{period}/close", apiKey(access.Operate, handleClosePeriod(d)))
	v1.handle(http.MethodGet, "/v1/audit", apiKey(access.Admin, handleListAudit(d)))

	// Stripe's webhook, authenticated by its signature.
	webhooks := r.prefix("/webhooks")
	webhooks.handle(http.MethodPost, "/webhooks/stripe", handleStripeWebhook(d))

	// The operator console: HTML for people, outside the API's document. Every answer carries its
	// session and headers (and every POST its CSRF check); every page but the login needs a login.
	c := newConsole(d, trail)
	page := func(h http.Handler) http.Handler { return c.Session(c.RequireLogin(h)) }
	console := r.prefix("/console")
	console.refuseWith(c.Session(c.NotFound()), c.Session(c.MethodNotAllowed()))
	console.handle(http.MethodGet, "/console", c.Session(http.RedirectHandler("/console/", http.StatusMovedPermanently)))
	console.handlePrefix(http.MethodGet, "/console/static/", c.Session(c.Static()))
	console.handle(http.MethodGet, "/console/login", c.Session(c.LoginForm()))
	console.handle(http.MethodPost, "/console/login", c.Session(c.Login()))
	console.handle(http.MethodPost, "/console/logout", page(c.Logout()))
	console.handle(http.MethodGet, "/console/", page(c.Overview()))
	console.handle(http.MethodGet, "/console/events", page(c.EventList()))
	console.handle(http.MethodGet, "/console/events/{id}", page(c.Event()))
	console.handle(http.MethodPost, "/console/events/{id}/dry-run", page(c.DryRun()))
	console.handle(http.MethodPost, "/console/events/{id}/replay", page(c.Replay()))
	console.handle(http.MethodPost, "/console/events/{id}/review", page(c.Review()))
	console.handle(http.MethodGet, "/console/accounts/{id}", page(c.Account()))
	console.handle(http.MethodGet, "/console/search", page(c.Search()))
	console.handle(http.MethodGet, "/console/drift", page(c.Drift()))
	console.handle(http.MethodGet, "/console/audit", page(c.Audit()))
	console.handle(http.MethodGet, "/console/finance", page(c.Finance()))

	// Open: for load balancers and API clients. The metrics show the service's internals: Prometheus
	// scrapes them with a read key (authorization: bearer).
	r.handle(http.MethodGet, "/healthz", handleHealthz())
	r.handle(http.MethodGet, "/readyz", handleReadyz(d))
	r.handle(http.MethodGet, "/metrics", apiKey(access.Read, d.Metrics.Handler()))
	r.handle(http.MethodGet, "/openapi.yaml", handleOpenAPI())

	return r.mux
}

// router adds routes to a gorilla/mux router or to one of its prefixes' subrouters. The router
// matches the escaped path, so that an encoded "/" stays inside its path segment: one (invalid) id,
// never a path into another route. Each route is timed by the metrics under its pattern, fixed here
// (not its path, which would explode the label set with ids), and traced under it when tracing is
// on. A request no route takes (404) or a route takes with other methods only (405) is refused in
// JSON, or as a page under /console, and is neither timed nor traced, its path and method being the
// caller's to choose.
type router struct {
	mux     *mux.Router
	metrics *metrics.Metrics
	tracing *tracing.Tracing
	// allow is shared by the root and its subrouters: every route's methods, for a 405's Allow.
	allow *allowList
}

func newRouter(m *metrics.Metrics, t *tracing.Tracing) *router {
	r := &router{mux: mux.NewRouter().UseEncodedPath(), metrics: m, tracing: t, allow: &allowList{}}
	r.refuseWith(handleNotFound(), handleMethodNotAllowed())
	return r
}

// prefix returns the subrouter of the paths that are path or lie under path/. It is tried with a
// string comparison, so a request under another prefix never meets its routes' regular expressions.
// Like the literal tails of handle, it compares the decoded path, which holds any literal text of the
// escaped path (that the routes match) unchanged, and needs no escaping first.
func (r *router) prefix(path string) *router {
	under := func(req *http.Request, _ *mux.RouteMatch) bool {
		p := req.URL.Path
		return strings.HasPrefix(p, path) && (len(p) == len(path) || p[len(path)] == '/')
	}
	sub := r.mux.MatcherFunc(under).Subrouter()
	return &router{mux: sub, metrics: r.metrics, tracing: r.tracing, allow: r.allow}
}

// refuseWith answers the requests under this prefix that no route takes: with methodNotAllowed, given
// its Allow header, when a route takes the path with other methods; else with notFound. Both of
// gorilla's refusals come here, and the routes' paths decide between them: gorilla answers a wrong
// method on a subrouter's route as not found when a later route of the subrouter does not match the
// path (gorilla/mux#751). Without refuseWith, a subrouter leaves its refusals to its parent's.
func (r *router) refuseWith(notFound, methodNotAllowed http.Handler) {
	refuse := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if allow := r.allow.methods(req); allow != "" {
			w.Header().Set("Allow", allow)
			methodNotAllowed.ServeHTTP(w, req)
			return
		}
		notFound.ServeHTTP(w, req)
	})
	r.mux.NotFoundHandler = refuse
	r.mux.MethodNotAllowedHandler = refuse
}

// handle routes method on path (a GET route takes HEAD too). The route is first tried by the literal
// text its path ends with, so that a request for another route of the prefix skips its regular
// expression.
func (r *router) handle(method, path string, h http.Handler) {
	tail := path[strings.LastIndexByte(path, '}')+1:]
	endsWithTail := func(req *http.Request, _ *mux.RouteMatch) bool {
		return strings.HasSuffix(req.URL.Path, tail)
	}
	r.add(r.mux.MatcherFunc(endsWithTail).Path(path), method, path, h)
}

// handlePrefix routes method on path and everything under it.
func (r *router) handlePrefix(method, path string, h http.Handler) {
	r.add(r.mux.PathPrefix(path), method, path, h)
}

func (r *router) add(route *mux.Route, method, pattern string, h http.Handler) {
	if err := route.GetError(); err != nil {
		panic(fmt.Sprintf("route %s %s: %v", method, pattern, err)) // a mistake in the list above
	}
	methods := []string{method}
	if method == http.MethodGet {
		methods = append(methods, http.MethodHead)
	}
	if names, _ := route.GetVarNames(); len(names) > 0 {
		h = unescapeVars(h)
	}
	route.Methods(methods...).Handler(r.tracing.Route(method, pattern, r.metrics.Timed(pattern, h)))
	path, _ := route.GetPathRegexp()
	*r.allow = append(*r.allow, allowedRoute{regexp.MustCompile(path), methods})
}

// unescapeVars hands h the route's variables (mux.Vars) unescaped, as they were before the request
// was sent: matching the escaped path leaves them escaped. The map is the request's own.
func unescapeVars(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		vars := mux.Vars(req)
		for name, v := range vars {
			if strings.Contains(v, "%") {
				if u, err := url.PathUnescape(v); err == nil {
					vars[name] = u
				}
			}
		}
		h.ServeHTTP(w, req)
	})
}

// allowList is every route's path, as gorilla matches it, with its methods, in registration order.
type allowList []allowedRoute

type allowedRoute struct {
	path    *regexp.Regexp
	methods []string
}

// methods lists the methods the routes of req's path take, for its 405's Allow header.
func (a *allowList) methods(req *http.Request) string {
	var allow []string
	p := req.URL.EscapedPath()
	for _, route := range *a {
		if !route.path.MatchString(p) {
			continue
		}
		for _, m := range route.methods {
			if !slices.Contains(allow, m) {
				allow = append(allow, m)
			}
		}
	}
	return strings.Join(allow, ", ")
}
