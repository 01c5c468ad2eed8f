package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gorilla/mux"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/access"
	"github.com/onceledger/onceledger/internal/audit"
	"github.com/onceledger/onceledger/internal/notify"
	"github.com/onceledger/onceledger/internal/stripeevents"
)

// Page sizes: enough for an incident, bounded so that no page is slow.
const (
	eventsPerPage    = 50
	timelineEntries  = 200
	paymentEntries   = 100
	waitingAccounts  = 20
	billingLagWindow = 10000
	discardedListed  = 20
	parkedPerPayment = 50
	lotsListed       = 50
	holdsListed      = 50
	expiringListed   = 20
	// expiringWithin is how soon a hold must expire to be on the overview.
	expiringWithin = time.Hour
)

type errorPage struct {
	frame
	Message string
}

type loginPage struct {
	frame
	Error string
}

// loginForm shows the login form with a fresh anonymous session for its CSRF token; a logged-in
// visitor goes straight to the overview.
func (c *Console) loginForm(w http.ResponseWriter, r *http.Request) error {
	sess, ok := sessionOf(r)
	if ok && sess.authenticated {
		http.Redirect(w, r, "/console/", http.StatusSeeOther)
		return nil
	}
	if !ok {
		sess = c.sessions.issueAnonymous(w, r)
		r = r.WithContext(withSession(r.Context(), sess))
	}
	c.render(w, r, http.StatusOK, "login", &loginPage{frame: c.frame(r, "Log in")})
	return nil
}

// login checks the key against the API keys (checkCSRF has checked the form's token) and replaces
// the session with a logged-in one, stored in the database. Only an operator's key (operate or admin)
// logs in: a product's spend key or a finance read key has no business in the console. Every attempt
// is in the audit trail; a failed one is logged with its address too, and counts in the throttle shared
// with the API's bearer check, which refuses (429) an address or key prefix that failed too often.
func (c *Console) login(w http.ResponseWriter, r *http.Request) error {
	secret, addr := r.PostFormValue("key"), audit.RemoteHost(r)
	if wait := c.Throttle.Wait(addr, secret); wait > 0 {
		seconds := strconv.Itoa(int(wait.Seconds()) + 1)
		c.Log.WarnContext(r.Context(), "console login refused: too many wrong keys", "remote", addr)
		c.record(r, "", http.StatusTooManyRequests, "too_many_attempts")
		w.Header().Set("Retry-After", seconds)
		c.render(w, r, http.StatusTooManyRequests, "login", &loginPage{frame: c.frame(r, "Log in"),
			Error: "Too many wrong keys from this address: try again in " + seconds + " s."})
		return nil
	}
	key := c.Keys.Match(secret)
	if key == nil {
		c.Throttle.Fail(addr, secret)
		c.Log.WarnContext(r.Context(), "console login refused: not an API key", "remote", addr)
		c.record(r, "", http.StatusUnauthorized, "invalid_api_key")
		c.render(w, r, http.StatusUnauthorized, "login", &loginPage{frame: c.frame(r, "Log in"),
			Error: "That key is not one of the API keys (ONCELEDGER_API_KEYS)."})
		return nil
	}
	if !key.Scopes.Allows(access.Operate) {
		c.Log.WarnContext(r.Context(), "console login refused: the key lacks the operate scope", "key", key.Name, "remote", addr)
		c.record(r, key.Name, http.StatusForbidden, "insufficient_scope")
		c.render(w, r, http.StatusForbidden, "login", &loginPage{frame: c.frame(r, "Log in"),
			Error: "That key lacks the operate scope the console needs."})
		return nil
	}
	// The login's record commits with its session.
	ctx, _ := db.WithPendingAudit(r.Context(), audit.Of(r, "console ", key.Name, http.StatusSeeOther, "ok"))
	if err := c.sessions.logIn(ctx, w, r, key.Name); err != nil {
		c.record(r, key.Name, http.StatusInternalServerError, outcome(http.StatusInternalServerError))
		return err
	}
	c.Log.InfoContext(r.Context(), "console login", "key", key.Name, "remote", addr)
	http.Redirect(w, r, "/console/", http.StatusSeeOther)
	return nil
}

// logout revokes the session: a copy of its cookie is refused from then on, on every replica.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) error {
	sess, _ := sessionOf(r) // RequireLogin found it
	if err := c.sessions.end(r.Context(), w, r, sess); err != nil {
		return err
	}
	http.Redirect(w, r, "/console/login", http.StatusSeeOther)
	return nil
}

type overviewPage struct {
	frame
	Parked      []db.ParkedReason
	ParkedTotal int64
	Waiting     []db.MissingAccount
	Lag         db.BillingLag
	// LagReachesBack: every decision looked at is unbilled, so older ones may be too.
	LagReachesBack bool
	Discarded      []notify.Discarded
	// DiscardedMore: there are more than those listed.
	DiscardedMore bool
	// DiscardedError says why discarded notifications could not be listed (River's tables missing).
	DiscardedError string
	// Expiring: holds still held that expire within ExpiringWithin (or are past their time), soonest
	// first; ExpiringMore: there are more than those listed.
	Expiring       []db.Hold
	ExpiringMore   bool
	ExpiringWithin time.Duration
}

// overview: what waits for an operator.
func (c *Console) overview(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	p := &overviewPage{frame: c.frame(r, "Overview")}
	var err error
	if p.Parked, err = db.ParkedEventsByReason(ctx, c.Pool); err != nil {
		return err
	}
	for _, reason := range p.Parked {
		p.ParkedTotal += reason.Events
	}
	if p.Waiting, err = db.DecisionsWaitingForAccounts(ctx, c.Pool, waitingAccounts); err != nil {
		return err
	}
	if p.Lag, err = db.MeasureBillingLag(ctx, c.Pool, billingLagWindow); err != nil {
		return err
	}
	p.LagReachesBack = p.Lag.Unbilled == p.Lag.Window
	if p.Expiring, err = db.HoldsExpiringWithin(ctx, c.Pool, expiringWithin, expiringListed+1); err != nil {
		return err
	}
	p.ExpiringWithin = expiringWithin
	p.ExpiringMore = len(p.Expiring) > expiringListed
	p.Expiring = p.Expiring[:min(len(p.Expiring), expiringListed)]
	discarded, err := notify.ListDiscarded(ctx, c.Jobs, discardedListed+1)
	if err != nil {
		c.Log.WarnContext(ctx, "console: discarded notifications", "err", err)
		p.DiscardedError = "River's tables could not be read (has `onceledger migrate up` run?)"
	}
	p.DiscardedMore = len(discarded) > discardedListed
	p.Discarded = discarded[:min(len(discarded), discardedListed)]
	c.render(w, r, http.StatusOK, "overview", p)
	return nil
}

// outcomes are the filters of the events list, as stripe_events_outcome_check knows them.
var outcomes = []string{stripeevents.OutcomeParked, stripeevents.OutcomeApplied, stripeevents.OutcomeRecorded, stripeevents.OutcomeIgnored}

type eventsPage struct {
	frame
	Outcome  string
	Outcomes []string
	Events   []db.Event
	Next     string // the next page's URL, empty on the last
}

// events lists stored events in arrival order, optionally of one outcome (?outcome=parked), a page
// at a time (?after=SEQ).
func (c *Console) events(w http.ResponseWriter, r *http.Request) error {
	outcome := r.URL.Query().Get("outcome")
	if outcome != "" && !slices.Contains(outcomes, outcome) {
		return &pageError{http.StatusBadRequest, "outcome must be one of parked, applied, recorded, ignored"}
	}
	var after int64
	if raw := r.URL.Query().Get("after"); raw != "" {
		var err error
		if after, err = strconv.ParseInt(raw, 10, 64); err != nil || after < 0 {
			return &pageError{http.StatusBadRequest, "after must be an event's seq"}
		}
	}
	list, err := db.ListEvents(r.Context(), c.Pool, outcome, after, eventsPerPage+1)
	if err != nil {
		return err
	}
	title := "Events"
	if outcome != "" {
		title = "Events: " + outcome
	}
	p := &eventsPage{frame: c.frame(r, title), Outcome: outcome, Outcomes: outcomes, Events: list}
	if len(list) > eventsPerPage {
		p.Events = list[:eventsPerPage]
		q := url.Values{"after": {strconv.FormatInt(p.Events[eventsPerPage-1].Seq, 10)}}
		if outcome != "" {
			q.Set("outcome", outcome)
		}
		p.Next = "/console/events?" + q.Encode()
	}
	c.render(w, r, http.StatusOK, "events", p)
	return nil
}

type eventPage struct {
	frame
	Event   db.Event
	Payload string // indented JSON
	// Entries are the entries of the event's payment, or the top-up it posted.
	Entries []db.Entry
	// DryRun is a dry run's answer, on the page a dry run renders.
	DryRun *stripeevents.DryRun
	// Done says what the last action did ("replayed", "reviewed"); Error why it failed.
	Done  string
	Error string
}

func (c *Console) eventPage(r *http.Request, id string) (*eventPage, error) {
	ctx := r.Context()
	ev, err := db.GetEvent(ctx, c.Pool, id)
	if err != nil {
		return nil, err
	}
	p := &eventPage{frame: c.frame(r, "Event "+ev.ID), Event: ev, Payload: string(ev.Payload)}
	var indented bytes.Buffer
	if json.Indent(&indented, ev.Payload, "", "  ") == nil {
		p.Payload = indented.String()
	}
	if ev.PaymentIntent != "" {
		p.Entries, err = db.PaymentEntries(ctx, c.Pool, ev.PaymentIntent, paymentEntries)
		return p, err
	}
	// A top-up without a payment intent is still found by its key.
	entry, err := db.EntryByDedupeKey(ctx, c.Pool, "stripe:"+ev.ID)
	switch {
	case err == nil:
		p.Entries = []db.Entry{entry}
	case !errors.Is(err, db.ErrNotFound):
		return nil, err
	}
	return p, nil
}

// event shows one stored event: its facts, payload, entries and the forms to act on it.
func (c *Console) event(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	p, err := c.eventPage(r, id)
	if err != nil {
		return err
	}
	switch done := r.URL.Query().Get("done"); done {
	case "replayed", "reviewed":
		p.Done = done
	}
	c.render(w, r, http.StatusOK, "event", p)
	return nil
}

// dryRun shows the event's page with the entries a replay would post now, computed by the replay's
// own code path in a transaction that is rolled back. It changes nothing, so it answers the POST
// with the page itself.
func (c *Console) dryRun(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	dry, err := c.Events.DryRun(r.Context(), id)
	if errors.Is(err, db.ErrNotFound) {
		return err
	}
	p, pageErr := c.eventPage(r, id)
	if pageErr != nil {
		return pageErr
	}
	status := http.StatusOK
	if err != nil {
		status = c.actionFailed(r, p, "dry run", err)
	} else {
		p.DryRun = &dry
	}
	c.render(w, r, status, "event", p)
	return nil
}

// replay re-applies the event (never doubling an effect) and shows its page again (POST, redirect,
// GET: reloading the page does not replay again).
func (c *Console) replay(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	_, err = c.Events.Replay(r.Context(), id)
	if err == nil {
		c.Log.InfoContext(r.Context(), "console replay", "event", id)
		http.Redirect(w, r, "/console/events/"+pathSegment(id)+"?done=replayed", http.StatusSeeOther)
		return nil
	}
	if errors.Is(err, db.ErrNotFound) {
		return err
	}
	p, pageErr := c.eventPage(r, id)
	if pageErr != nil {
		return pageErr
	}
	c.render(w, r, c.actionFailed(r, p, "replay", err), "event", p)
	return nil
}

// review marks a parked event as looked at by the logged-in key, so that verify names it instead of
// reporting the event; its audit record is written in the review's transaction (db.InAuditedTx).
func (c *Console) review(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	sess, _ := sessionOf(r) // RequireLogin found it
	var reviewed bool
	err = db.InAuditedTx(r.Context(), c.Pool, func(tx db.Tx) (_ bool, err error) {
		reviewed, err = db.MarkReviewed(r.Context(), tx, id, sess.keyName)
		return reviewed, err
	})
	if err != nil {
		return err
	}
	if !reviewed {
		p, err := c.eventPage(r, id)
		if err != nil {
			return err
		}
		p.Error = "Only a parked event can be marked reviewed."
		c.render(w, r, http.StatusConflict, "event", p)
		return nil
	}
	c.Log.InfoContext(r.Context(), "console review", "event", id)
	http.Redirect(w, r, "/console/events/"+pathSegment(id)+"?done=reviewed", http.StatusSeeOther)
	return nil
}

// actionFailed puts why a dry run or replay failed on the page and returns the status to answer.
func (c *Console) actionFailed(r *http.Request, p *eventPage, action string, err error) int {
	if errors.Is(err, stripeevents.ErrStripeUnavailable) {
		p.Error = "The " + action + " needs the Stripe API, which did not answer; nothing was changed. Try again later."
		return http.StatusServiceUnavailable
	}
	c.Log.ErrorContext(r.Context(), "console "+action, "event", p.Event.ID, "err", err)
	p.Error = "The " + action + " failed and changed nothing; the server's log has the detail."
	return http.StatusInternalServerError
}

type accountPage struct {
	frame
	Account db.Account
	// Lots: the open lots in draw order; LotsMore: there are more than those listed.
	Lots     []db.Lot
	LotsMore bool
	// Holds: the holds still held, soonest to expire first; HoldsMore: there are more.
	Holds     []db.Hold
	HoldsMore bool
	// Limits: the spend limits, each with its current window.
	Limits []db.Limit
	// Members: the accounts that draw on this one (its pool is Account.ParentID), with this month's
	// spending, their own and drawn from this pool.
	Members []db.Member
	// Burn draws the members' spending this month, their own and drawn from this pool.
	Burn burn
	// Automation: the saved card, auto-recharge and alert settings; RechargeStatus: why recharge is
	// (not) charging now, and its budget window.
	Automation     db.Automation
	RechargeStatus db.RechargeStatus
	Timeline       []db.TimelineEntry
	// Limited: the timeline shows only the newest timelineEntries.
	Limited bool
	Chart   chart
}

// account shows an account's balance, held and available; its open lots in draw order and its holds
// still held; its spend limits with their current windows; its pool and its members; its auto-recharge and alert settings and recharge status; its newest entries with the balance after each,
// and a chart of that balance.
func (c *Console) account(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := pathID(r)
	if err != nil {
		return err
	}
	acct, err := db.GetAccount(ctx, c.Pool, id)
	if err != nil {
		return err
	}
	p := &accountPage{frame: c.frame(r, "Account "+acct.ID), Account: acct}
	if p.Lots, err = db.Lots(ctx, c.Pool, acct.ID, false, lotsListed+1); err != nil {
		return err
	}
	p.LotsMore = len(p.Lots) > lotsListed
	p.Lots = p.Lots[:min(len(p.Lots), lotsListed)]
	if p.Holds, err = db.OpenHolds(ctx, c.Pool, acct.ID, holdsListed+1); err != nil {
		return err
	}
	p.HoldsMore = len(p.Holds) > holdsListed
	p.Holds = p.Holds[:min(len(p.Holds), holdsListed)]
	if p.Limits, err = db.Limits(ctx, c.Pool, acct.ID); err != nil {
		return err
	}
	if p.Members, err = db.Members(ctx, c.Pool, acct.ID); err != nil {
		return err
	}
	p.Burn = burnChart(p.Members)
	if p.Automation, err = db.GetAutomation(ctx, c.Pool, acct.ID); err != nil {
		return err
	}
	if p.RechargeStatus, err = db.GetRechargeStatus(ctx, c.Pool, acct.ID); err != nil {
		return err
	}
	if p.Timeline, err = db.AccountTimeline(ctx, c.Pool, acct.ID, timelineEntries); err != nil {
		return err
	}
	p.Limited = len(p.Timeline) == timelineEntries
	p.Chart = balanceChart(p.Timeline)
	c.render(w, r, http.StatusOK, "account", p)
	return nil
}

type searchPage struct {
	frame
	Account *db.Account
	Event   *db.Event
	Entry   *db.Entry // the entry whose dedupe key is the query
	// Payment: the entries and parked events of the payment_intent the query names.
	PaymentEntries []db.Entry
	PaymentParked  []db.Event
	Found          bool
}

// search looks the query up, exactly, as an account id, an event id, a dedupe key and a
// payment_intent.
func (c *Console) search(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	q := r.URL.Query().Get("q")
	if !storableText(q) {
		return &pageError{http.StatusBadRequest, "Search for text: valid UTF-8 without NUL characters."}
	}
	p := &searchPage{frame: c.frame(r, "Search")}
	p.Query = q
	if q == "" {
		c.render(w, r, http.StatusOK, "search", p)
		return nil
	}
	acct, err := db.GetAccount(ctx, c.Pool, q)
	if found, err := found(err); err != nil {
		return err
	} else if found {
		p.Account = &acct
	}
	ev, err := db.GetEvent(ctx, c.Pool, q)
	if found, err := found(err); err != nil {
		return err
	} else if found {
		p.Event = &ev
	}
	entry, err := db.EntryByDedupeKey(ctx, c.Pool, q)
	if found, err := found(err); err != nil {
		return err
	} else if found {
		p.Entry = &entry
	}
	if p.PaymentEntries, err = db.PaymentEntries(ctx, c.Pool, q, paymentEntries); err != nil {
		return err
	}
	if p.PaymentParked, err = db.ParkedEventsOfPayment(ctx, c.Pool, q, parkedPerPayment); err != nil {
		return err
	}
	p.Found = p.Account != nil || p.Event != nil || p.Entry != nil || len(p.PaymentEntries) > 0 || len(p.PaymentParked) > 0
	c.render(w, r, http.StatusOK, "search", p)
	return nil
}

// found tells a lookup's answer from its failure: db.ErrNotFound is an answer.
func found(err error) (bool, error) {
	if errors.Is(err, db.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// pathID is the {id} of the request's path, which the API's router matches escaped and hands over
// unescaped (api/routes.go). An id that is not text the database can hold (not UTF-8, or holding NUL)
// names nothing: 404, without asking the database, which would refuse the query.
func pathID(r *http.Request) (string, error) {
	id := mux.Vars(r)["id"]
	if !storableText(id) {
		return "", errNotFound
	}
	return id, nil
}

// storableText: s is text PostgreSQL can hold, valid UTF-8 without NUL.
func storableText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// pathSegment escapes an id for one segment of a console path: / ? # and the like are percent-encoded,
// and an id of . or .. is encoded whole, so that no browser or router takes it for a step between
// folders.
func pathSegment(id string) string {
	if id == "." || id == ".." {
		return strings.ReplaceAll(id, ".", "%2E")
	}
	return url.PathEscape(id)
}

type auditPage struct {
	frame
	Records []db.AuditRecord
	Next    string // the next (older) page's URL, empty on the last
}

// auditRecordsPerPage: one screen of the audit trail.
const auditRecordsPerPage = 100

// audit lists the audit trail, newest first, a page at a time (?before=ID). Like GET /v1/audit, only
// for an admin key's session: operators act, admins read who did.
func (c *Console) audit(w http.ResponseWriter, r *http.Request) error {
	sess, _ := sessionOf(r) // RequireLogin found it
	if key := c.Keys.Named(sess.keyName); key == nil || !key.Scopes.Allows(access.Admin) {
		return &pageError{http.StatusForbidden, "The audit trail is for admin keys."}
	}
	var before int64
	if raw := r.URL.Query().Get("before"); raw != "" {
		var err error
		if before, err = strconv.ParseInt(raw, 10, 64); err != nil || before < 1 {
			return &pageError{http.StatusBadRequest, "before must be a record's number"}
		}
	}
	list, err := db.ListAudit(r.Context(), c.Pool, before, auditRecordsPerPage+1)
	if err != nil {
		return err
	}
	p := &auditPage{frame: c.frame(r, "Audit trail"), Records: list}
	if len(list) > auditRecordsPerPage {
		p.Records = list[:auditRecordsPerPage]
		p.Next = "/console/audit?before=" + strconv.FormatInt(p.Records[auditRecordsPerPage-1].ID, 10)
	}
	c.render(w, r, http.StatusOK, "audit", p)
	return nil
}
