// Package console is the operator console: server-rendered pages under /console/ for what an
// operator needs in an incident — parked events with a dry-run replay, replay and review; an
// account's timeline and balance chart; search by account, event, payment or dedupe key.
//
// Pages are html/template with the templates and CSS embedded; they need no JavaScript, and the
// Content-Security-Policy allows no inline script or style. Logging in takes an API key with the operate
// (or admin) scope and gives a session stored in the database (session.go); every form carries a CSRF
// token bound to the session, and every action is in the audit trail.
// Data comes through package db, replays and dry runs through stripeevents, the webhook's own code path.
package console

import (
	"embed"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"strings"

	"github.com/riverqueue/river"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/access"
	"github.com/onceledger/onceledger/internal/audit"
	"github.com/onceledger/onceledger/internal/stripeevents"
)

// Deps is what the console needs; the API's router builds it.
type Deps struct {
	// Pool is handed to package db; the console runs no SQL of its own.
	Pool *db.Pool
	// Jobs is the process's River client, which lists the given-up notifications.
	Jobs *river.Client[db.Tx]
	// Events replays stored events and dry-runs their replay.
	Events *stripeevents.Processor
	Log    *slog.Logger
	// Keys are the API keys; one with the operate (or admin) scope logs in.
	Keys access.Keys
	// Trail records every console action, and every refused one, in the audit trail.
	Trail audit.Recorder
	// Throttle refuses logins from an address, or with a key prefix, that failed too often.
	Throttle *access.Throttle
	// Secure marks the session cookie Secure, and sends HSTS: the console is served over TLS (a proxy
	// may terminate it).
	Secure bool
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// contentSecurityPolicy: nothing but this origin's stylesheet, and forms that post back to it.
const contentSecurityPolicy = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'"

// Console is the console's pages and the middleware around them, handed out for the API's router
// (api/routes.go) to list route by route: every console route wrapped in Session, and every page but
// the login's in RequireLogin too.
type Console struct {
	Deps
	sessions sessions
	pages    map[string]*template.Template
}

// New returns the console; it serves nothing until its handlers are routed.
func New(d Deps) *Console {
	return &Console{Deps: d, sessions: sessions{pool: d.Pool, keys: d.Keys, secure: d.Secure}, pages: parsePages()}
}

// The pages (pages.go), each the handler of one route.
func (c *Console) LoginForm() http.Handler { return c.handle(c.loginForm) }
func (c *Console) Login() http.Handler     { return c.handle(c.login) }
func (c *Console) Logout() http.Handler    { return c.handle(c.logout) }
func (c *Console) Overview() http.Handler  { return c.handle(c.overview) }
func (c *Console) EventList() http.Handler { return c.handle(c.events) }
func (c *Console) Event() http.Handler     { return c.handle(c.event) }
func (c *Console) DryRun() http.Handler    { return c.handle(c.dryRun) }
func (c *Console) Replay() http.Handler    { return c.handle(c.replay) }
func (c *Console) Review() http.Handler    { return c.handle(c.review) }
func (c *Console) Account() http.Handler   { return c.handle(c.account) }
func (c *Console) Search() http.Handler    { return c.handle(c.search) }
func (c *Console) Drift() http.Handler     { return c.handle(c.drift) }
func (c *Console) Audit() http.Handler     { return c.handle(c.audit) }
func (c *Console) Finance() http.Handler   { return c.handle(c.finance) }

// Static serves the embedded stylesheet, routed under /console/static/ (embedded as static/).
func (c *Console) Static() http.Handler {
	return http.StripPrefix("/console", http.FileServerFS(staticFS))
}

// NotFound and MethodNotAllowed answer, as pages, a console path no route takes and a route asked
// with a method it does not take.
func (c *Console) NotFound() http.Handler {
	return c.handle(func(http.ResponseWriter, *http.Request) error { return errNotFound })
}

func (c *Console) MethodNotAllowed() http.Handler {
	return c.handle(func(http.ResponseWriter, *http.Request) error { return errMethodNotAllowed })
}

// Session is the middleware of every console response, refusals included: the security headers, the
// request's session in its context, and the CSRF check of every POST.
func (c *Console) Session(next http.Handler) http.Handler {
	return c.secureHeaders(c.checkCSRF(next))
}

// secureHeaders applies to every console response: the CSP, no sniffing, no framing, no caching of
// pages that show money, no referrer leaving the console; HSTS when the console is served over TLS.
func (c *Console) secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		if c.Secure || r.TLS != nil {
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// maxForm bounds a form's body: the console's forms hold a token and, at most, a key.
const maxForm = 16 << 10

// checkCSRF puts the request's session, if any, in its context, and refuses with 403 every POST
// whose csrf_token is not the one of its session (or that has no session), before any handler runs;
// the refusal is in the audit trail.
func (c *Console) checkCSRF(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, ok, err := c.sessions.read(r)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		if ok {
			r = r.WithContext(withSession(r.Context(), sess))
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxForm)
			if !ok || !c.sessions.validCSRF(sess, r.PostFormValue("csrf_token")) {
				c.fail(w, r, errForbidden)
				c.record(r, sess.keyName, http.StatusForbidden, "invalid_csrf_token")
				return
			}
			if r.URL.Path != "/console/login" { // the login records itself: it knows the key
				c.recordAction(w, r, sess.keyName, next)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// recordAction runs the action next with its record pending (db.PendingAudit) under keyName: an
// action that commits an effect (a replay, a review, a logout) writes it in that transaction, answered
// with its redirect (POST, redirect, GET); any other answer (a failure, a dry run, which commits
// nothing) is recorded after it, with its status.
func (c *Console) recordAction(w http.ResponseWriter, r *http.Request, keyName string, next http.Handler) {
	ctx, pending := db.WithPendingAudit(r.Context(), audit.Of(r, "console ", keyName, http.StatusSeeOther, "ok"))
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	next.ServeHTTP(sw, r.WithContext(ctx))
	if !pending.Written() {
		c.record(r, keyName, sw.status, outcome(sw.status))
	}
}

// statusWriter remembers the status of the answer, for the audit trail.
type statusWriter struct {
	http.ResponseWriter
	status  int
	written bool
}

func (w *statusWriter) WriteHeader(status int) {
	if !w.written {
		w.status, w.written = status, true
	}
	w.ResponseWriter.WriteHeader(status)
}

// outcome is a console action's outcome in the audit trail: "ok", or its status in words
// ("conflict", "service_unavailable").
func outcome(status int) string {
	if status < 400 {
		return "ok"
	}
	return strings.ReplaceAll(strings.ToLower(http.StatusText(status)), " ", "_")
}

// record records a console action (or its refusal) in the audit trail, under the key that logged in.
func (c *Console) record(r *http.Request, keyName string, status int, outcome string) {
	c.Trail.Record(r, audit.Of(r, "console ", keyName, status, outcome))
}

// RequireLogin sends a visitor without a logged-in session to the login page; it runs inside Session,
// which finds the session.
func (c *Console) RequireLogin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sess, ok := sessionOf(r); !ok || !sess.authenticated {
			http.Redirect(w, r, "/console/login", http.StatusSeeOther)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// pageError is an error shown to the operator as is, with its status.
type pageError struct {
	status  int
	message string
}

func (e *pageError) Error() string { return e.message }

var (
	errNotFound         = &pageError{http.StatusNotFound, "Nothing here."}
	errMethodNotAllowed = &pageError{http.StatusMethodNotAllowed, "This page does not take that method."}
	errForbidden        = &pageError{http.StatusForbidden,
		"This form has expired or did not come from this console. Reload the page and try again."}
)

// handle runs fn and shows its error, if any, as an error page.
func (c *Console) handle(fn func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := fn(w, r); err != nil {
			c.fail(w, r, err)
		}
	})
}

// fail shows err: a pageError as it is, db.ErrNotFound as a 404, anything else as a 500 that is
// logged (its detail is not shown).
func (c *Console) fail(w http.ResponseWriter, r *http.Request, err error) {
	var pe *pageError
	switch {
	case errors.As(err, &pe):
	case errors.Is(err, db.ErrNotFound):
		pe = &pageError{http.StatusNotFound, err.Error()}
	default:
		c.Log.ErrorContext(r.Context(), "console", "method", r.Method, "path", r.URL.Path, "err", err)
		pe = &pageError{http.StatusInternalServerError, "Something went wrong; the server's log has the detail."}
	}
	c.render(w, r, pe.status, "error", &errorPage{frame: c.frame(r, http.StatusText(pe.status)), Message: pe.message})
}
