package reconcile

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v79"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/stripeevents"
)

// The drift pass (SPEC §20) is the standing proof that Stripe and the ledger agree. Over a window it
// lists Stripe's balance-affecting objects of this deployment — succeeded PaymentIntents and paid
// Checkout Sessions (one payment, under its PaymentIntent), refunds and disputes — and matches each to
// its ledger effect by the key the webhook posts it under (SPEC §3); it also matches every money-backed
// credit the ledger posted in the window (topups, refund restores, won disputes) to its Stripe object,
// fetching by id the few the listing did not hold. What does not match is recorded in stripe_drift; a
// window where everything matched gets a checkpoint.
//
// Every Stripe call is made before the pass's one transaction, which only records what was found: a
// Stripe outage fails the pass (recording nothing) and delays the report, never a credit, since the
// webhook never waits on it. Like the rest of the reconciler it keeps no state: any window can be
// checked again, by any number of processes, and re-running adds nothing.

const (
	// stripePageSize is the page size of every listing (Stripe's largest).
	stripePageSize = 100
	// driftProgressEvery is how many listed objects go between two progress reports.
	driftProgressEvery = 1000
	// driftDays is how many complete UTC days back the scheduled pass checks, each day once clean: Stripe
	// retries a webhook for three days, so a week covers a payment credited late, and catches up after
	// days without a pass.
	driftDays = 7
	// driftSettle is how long after its end a day is first checked: webhooks of payments made just before
	// midnight arrive within seconds, and are not reported as missing meanwhile.
	driftSettle = time.Hour
)

// DriftReport is what one drift pass over one window did.
type DriftReport struct {
	// Skipped says why the pass did not run; empty when it did.
	Skipped string
	// Since and Until bound the window: objects created and credits posted in [Since, Until).
	Since, Until time.Time
	// Listed counts the Stripe objects listed, every kind and page; Others those of another deployment
	// (another mode, or a payment this deployment has neither an order nor a parked event of) or that
	// move no money (an unpaid session, an inquiry); Retrieved the objects fetched by id because a credit
	// of the window names them and the listing did not hold them.
	Listed, Others, Retrieved int
	// Payments, Refunds and Disputes are the Stripe objects of this deployment checked; Matched those
	// that matched their ledger effects.
	Payments, Refunds, Disputes, Matched int
	// Credits are the money-backed credits posted in the window; CreditsMatched those matched to their
	// Stripe object.
	Credits, CreditsMatched int
	// Found is the drift found.
	Found []db.Drift
	// Resolved counts the drift recorded by earlier passes that this one found matched.
	Resolved int64
	// Digest is this pass's digest of what it matched, when the window is clean; Checkpoint is the
	// window's checkpoint then, and Checkpointed says this pass recorded it (an earlier clean pass may
	// have: its digest stays).
	Digest       string
	Checkpoint   *db.DriftCheckpoint
	Checkpointed bool
}

// CheckStripeDays runs the drift pass over each complete UTC day of the last driftDays that has no
// checkpoint yet, oldest first, each day its own window, first checked driftSettle after it ends. It
// stops at the first failure (a Stripe outage): the days left are checked by the next run.
func (r *Reconciler) CheckStripeDays(ctx context.Context, now time.Time) (reports []DriftReport, err error) {
	if r.stripe == nil {
		return []DriftReport{{Skipped: "STRIPE_SECRET_KEY not set"}}, nil
	}
	end := now.Add(-driftSettle).UTC().Truncate(24 * time.Hour)
	start := end.AddDate(0, 0, -driftDays)
	checkpoints, err := db.DriftCheckpointsSince(ctx, r.pool, start)
	if err != nil {
		return nil, err
	}
	defer func() {
		// Open drift of windows not checked now counts too.
		err = errors.Join(err, r.countDrift(ctx))
	}()
	for day := start; day.Before(end); day = day.AddDate(0, 0, 1) {
		next := day.AddDate(0, 0, 1)
		if slices.ContainsFunc(checkpoints, func(c db.DriftCheckpoint) bool {
			return c.WindowStart.Equal(day) && c.WindowEnd.Equal(next)
		}) {
			continue
		}
		rep, err := r.CheckStripe(ctx, day, next)
		reports = append(reports, rep)
		if err != nil {
			return reports, err
		}
	}
	return reports, nil
}

// RunStripeDrift runs CheckStripeDays now and then every interval until ctx is cancelled, handing each
// outcome to onPass (which logs a failure once: the next run retries it).
func (r *Reconciler) RunStripeDrift(ctx context.Context, interval time.Duration, onPass func([]DriftReport, error)) {
	every(ctx, interval, func() {
		reps, err := r.CheckStripeDays(ctx, time.Now())
		if ctx.Err() == nil {
			onPass(reps, err)
		}
	})
}

// CheckStripe runs the drift pass over the window [since, until) (whole seconds, as Stripe filters),
// records what it found, resolves what it found matched, checkpoints a clean window, and sets the
// onceledger_stripe_drift gauge. On a failure nothing is recorded.
func (r *Reconciler) CheckStripe(ctx context.Context, since, until time.Time) (DriftReport, error) {
	rep := DriftReport{Since: since.Truncate(time.Second), Until: until.Truncate(time.Second)}
	if r.stripe == nil {
		rep.Skipped = "STRIPE_SECRET_KEY not set"
		return rep, nil
	}
	if !rep.Until.After(rep.Since) {
		return rep, fmt.Errorf("stripe drift: the window %s–%s is empty", rep.Since, rep.Until)
	}
	listed, err := r.listStripe(ctx, &rep)
	if err != nil {
		return rep, err
	}
	c := &driftCheck{r: r, rep: &rep}
	if err := c.sortOut(ctx, listed); err != nil {
		return rep, err
	}
	if err := c.readCredits(ctx); err != nil {
		return rep, err
	}
	if err := c.readLedger(ctx); err != nil {
		return rep, err
	}
	c.match()
	if err := c.findRepairs(ctx); err != nil {
		return rep, err
	}
	r.driftProgress(rep)

	pass := db.DriftPass{Found: rep.Found, Checked: c.checked}
	if len(rep.Found) == 0 {
		rep.Digest = c.digest()
		pass.Checkpoint = &db.DriftCheckpoint{
			WindowStart: rep.Since, WindowEnd: rep.Until, Objects: int32(rep.Matched), Credits: int32(rep.CreditsMatched),
			Digest: rep.Digest,
		}
	}
	recorded, err := db.RecordDriftPass(ctx, r.pool, pass)
	if err != nil {
		return rep, err
	}
	rep.Resolved, rep.Checkpointed = recorded.Resolved, recorded.Checkpointed
	if pass.Checkpoint != nil {
		checkpoint, err := db.GetDriftCheckpoint(ctx, r.pool, rep.Since, rep.Until)
		if err != nil {
			return rep, err
		}
		rep.Checkpoint = &checkpoint
	}
	return rep, r.countDrift(ctx)
}

// countDrift sets the gauge of open drift by reason from the table, so that it counts every pass's
// findings, whichever process ran them.
func (r *Reconciler) countDrift(ctx context.Context) error {
	open, err := db.OpenDriftByReason(ctx, r.pool)
	if err != nil {
		return err
	}
	for _, reason := range db.DriftReasons {
		r.metrics.StripeDrift.WithLabelValues(reason).Set(float64(open[reason]))
	}
	return nil
}

func (r *Reconciler) driftProgress(rep DriftReport) {
	if r.onDrift != nil {
		r.onDrift(rep)
	}
}

// listing is what Stripe listed for a window, of this deployment's mode.
type listing struct {
	sessions []*stripe.CheckoutSession
	intents  []*stripe.PaymentIntent
	refunds  []*stripe.Refund
	disputes []*stripe.Dispute
}

// listStripe lists the window's objects, every page (stripe-go's iterators fetch the next page as they
// go). An object of the other mode is counted and left out; the first failure ends the pass.
func (r *Reconciler) listStripe(ctx context.Context, rep *DriftReport) (listing, error) {
	created := &stripe.RangeQueryParams{GreaterThanOrEqual: rep.Since.Unix(), LesserThan: rep.Until.Unix()}
	page := stripe.ListParams{Limit: stripe.Int64(stripePageSize), Context: ctx}
	var l listing
	// listed counts an object and reports progress; ours tells whether its mode is the deployment's.
	listed := func() {
		rep.Listed++
		if rep.Listed%driftProgressEvery == 0 {
			r.driftProgress(*rep)
		}
	}
	ours := func(livemode bool) bool {
		listed()
		if r.livemode != nil && livemode != *r.livemode {
			rep.Others++
			return false
		}
		return true
	}

	sessions := r.stripe.CheckoutSessions.List(&stripe.CheckoutSessionListParams{ListParams: page, CreatedRange: created, Status: stripe.String(string(stripe.CheckoutSessionStatusComplete))})
	err := each(sessions.Iter, func(s *stripe.CheckoutSession) {
		if ours(s.Livemode) {
			l.sessions = append(l.sessions, s)
		}
	})
	if err != nil {
		return listing{}, fmt.Errorf("stripe drift: list Checkout Sessions: %w", err)
	}
	intents := r.stripe.PaymentIntents.List(&stripe.PaymentIntentListParams{ListParams: page, CreatedRange: created})
	err = each(intents.Iter, func(pi *stripe.PaymentIntent) {
		if ours(pi.Livemode) {
			l.intents = append(l.intents, pi)
		}
	})
	if err != nil {
		return listing{}, fmt.Errorf("stripe drift: list PaymentIntents: %w", err)
	}
	refunds := r.stripe.Refunds.List(&stripe.RefundListParams{ListParams: page, CreatedRange: created})
	// A refund states no mode: it is this deployment's when its payment is.
	err = each(refunds.Iter, func(re *stripe.Refund) {
		listed()
		l.refunds = append(l.refunds, re)
	})
	if err != nil {
		return listing{}, fmt.Errorf("stripe drift: list refunds: %w", err)
	}
	disputes := r.stripe.Disputes.List(&stripe.DisputeListParams{ListParams: page, CreatedRange: created})
	err = each(disputes.Iter, func(d *stripe.Dispute) {
		if ours(d.Livemode) {
			l.disputes = append(l.disputes, d)
		}
	})
	if err != nil {
		return listing{}, fmt.Errorf("stripe drift: list disputes: %w", err)
	}
	return l, nil
}

// each hands every object of a listing to fn, fetching pages as it goes.
func each[T any](it *stripe.Iter, fn func(T)) error {
	for it.Next() {
		fn(it.Current().(T))
	}
	return it.Err()
}

// payment is one payment of this deployment: a Checkout Session and its PaymentIntent, or a
// PaymentIntent alone (a recharge), under the PaymentIntent's id.
type payment struct {
	paymentIntent, session string
	order                  *db.Topup
	amount                 int64
	currency               string
	// status is the PaymentIntent's when it was fetched by id; a listed payment succeeded.
	status  string
	created time.Time
	// credits are its topup entries.
	credits []db.Entry
}

// reversalKind is what a refund or a dispute is checked as.
type reversalKind struct {
	name            string
	missing         string // its drift reason when the ledger took nothing back
	key, restoreKey func(id string) string
	moves           func(status, caseType string) (reversed, restored bool)
	// reversalEntry and restoreEntry are the kinds of its entries.
	reversalEntry, restoreEntry string
}

var (
	refundKind = reversalKind{
		name: "refund", missing: db.DriftMissingRefund, key: stripeevents.RefundKey, restoreKey: stripeevents.RefundRestoreKey,
		moves:         func(status, _ string) (bool, bool) { return stripeevents.RefundMoves(status) },
		reversalEntry: db.KindRefund, restoreEntry: db.KindRefundRestore,
	}
	disputeKind = reversalKind{
		name: "dispute", missing: db.DriftMissingDispute, key: stripeevents.DisputeKey, restoreKey: stripeevents.DisputeWonKey,
		moves: stripeevents.DisputeMoves, reversalEntry: db.KindDispute, restoreEntry: db.KindDisputeWon,
	}
)

// reversalObject is a refund or a dispute of one of this deployment's payments.
type reversalObject struct {
	kind                       *reversalKind
	id, paymentIntent, charge  string
	accountID                  string
	amount                     int64
	currency, status, caseType string
	created                    time.Time
	reversal, restore          *db.Entry
	// order is the paid order of its payment, when known: its reversal takes back the credits its
	// amount bought at the order's price.
	order *db.Topup
}

// driftCheck is one pass's working state, between the listing and the record.
type driftCheck struct {
	r   *Reconciler
	rep *DriftReport
	// payments by PaymentIntent, refunds and disputes by id: this deployment's objects to check.
	payments  map[string]*payment
	reversals map[string]*reversalObject
	// orders by PaymentIntent, session and id; parked, the payments with a parked event.
	byIntent, bySession, byID map[string]*db.Topup
	parked                    map[string]bool
	// credits are the window's money-backed credits; creditObject names the object each belongs to.
	credits      []db.Entry
	creditObject map[int64]string
	// checked are the objects looked at; matched those that matched, with their digest line.
	checked []string
	matched map[string]string
}

// sortOut keeps this deployment's objects: a payment is ours when its order is (found by its session,
// its PaymentIntent, or the topup_id its metadata names with the same account_id) or when one of its
// events is parked here; a refund or dispute when its payment is. The rest are counted as others.
func (c *driftCheck) sortOut(ctx context.Context, l listing) error {
	var intents, sessions, ids []string
	for _, s := range l.sessions {
		sessions = append(sessions, s.ID)
		ids = append(ids, s.Metadata["topup_id"])
		if s.PaymentIntent != nil {
			intents = append(intents, s.PaymentIntent.ID)
		}
	}
	for _, pi := range l.intents {
		intents = append(intents, pi.ID)
		ids = append(ids, pi.Metadata["topup_id"])
	}
	for _, re := range l.refunds {
		if re.PaymentIntent != nil {
			intents = append(intents, re.PaymentIntent.ID)
		}
	}
	for _, d := range l.disputes {
		if d.PaymentIntent != nil {
			intents = append(intents, d.PaymentIntent.ID)
		}
	}
	if err := c.readOrders(ctx, intents, sessions, ids); err != nil {
		return err
	}
	// A payment whose event reached this deployment and was parked (its account not created yet, an
	// amount its order does not allow, ...) is ours too, order or not.
	parked, err := db.ParkedEventsForObjects(ctx, c.r.pool, compact(intents), compact(slices.Concat(intents, sessions)))
	if err != nil {
		return err
	}
	c.parked = map[string]bool{}
	for _, e := range parked {
		c.parked[e.PaymentIntent] = true
	}

	c.payments = map[string]*payment{}
	c.reversals = map[string]*reversalObject{}
	// Sessions first: a session's amount is what its completion credits, and its PaymentIntent, listed
	// too, is the same payment.
	for _, s := range l.sessions {
		if s.PaymentIntent == nil {
			c.rep.Others++ // no payment: a session paid nothing, or not in payment mode
			continue
		}
		order := c.orderOf(s.Metadata, s.ID, s.PaymentIntent.ID)
		if order == nil || s.PaymentStatus != stripe.CheckoutSessionPaymentStatusPaid || s.AmountTotal <= 0 {
			c.rep.Others++
			continue
		}
		c.addPayment(&payment{
			paymentIntent: s.PaymentIntent.ID, session: s.ID, order: order, amount: s.AmountTotal,
			currency: string(s.Currency), status: string(stripe.PaymentIntentStatusSucceeded), created: time.Unix(s.Created, 0),
		})
	}
	for _, pi := range l.intents {
		if _, ok := c.payments[pi.ID]; ok {
			continue // the payment of a session listed above: one payment, reported once
		}
		order := c.orderOf(pi.Metadata, "", pi.ID)
		if order == nil || pi.Status != stripe.PaymentIntentStatusSucceeded {
			c.rep.Others++
			continue
		}
		c.addPayment(&payment{
			paymentIntent: pi.ID, order: order, amount: pi.Amount, currency: string(pi.Currency),
			status: string(pi.Status), created: time.Unix(pi.Created, 0),
		})
	}
	for _, re := range l.refunds {
		c.addReversal(&refundKind, re.ID, re.PaymentIntent, re.Charge, re.Amount, string(re.Currency), string(re.Status), "", re.Created, "")
	}
	for _, d := range l.disputes {
		c.addReversal(&disputeKind, d.ID, d.PaymentIntent, d.Charge, d.Amount, string(d.Currency), string(d.Status), caseType(d), d.Created, "")
	}
	return nil
}

// readOrders reads the orders of the given payments, sessions and ids into the indexes.
func (c *driftCheck) readOrders(ctx context.Context, intents, sessions, ids []string) error {
	orders, err := db.TopupsForPayments(ctx, c.r.pool, compact(intents), compact(sessions), compact(ids))
	if err != nil {
		return err
	}
	if c.byID == nil {
		c.byIntent, c.bySession, c.byID = map[string]*db.Topup{}, map[string]*db.Topup{}, map[string]*db.Topup{}
	}
	for i := range orders {
		o := &orders[i]
		c.byID[o.ID] = o
		if o.SessionID != "" {
			c.bySession[o.SessionID] = o
		}
		if o.PaymentIntent != "" {
			c.byIntent[o.PaymentIntent] = o
		}
	}
	return nil
}

// orderOf is this deployment's order of a Stripe payment, or nil: the order of its session or its
// PaymentIntent, or the one its metadata topup_id names, when its metadata account_id (if any) is that
// order's account. Another deployment's objects name orders this database does not hold. A payment
// with a parked event here and no order gets an order of the account its metadata names (none: "").
func (c *driftCheck) orderOf(metadata map[string]string, session, paymentIntent string) *db.Topup {
	if o := c.bySession[session]; session != "" && o != nil {
		return o
	}
	if o := c.byIntent[paymentIntent]; paymentIntent != "" && o != nil {
		return o
	}
	if o := c.byID[metadata["topup_id"]]; o != nil && (metadata["account_id"] == "" || metadata["account_id"] == o.AccountID) {
		return o
	}
	if c.parked[paymentIntent] {
		return &db.Topup{AccountID: metadata["account_id"]}
	}
	return nil
}

func (c *driftCheck) addPayment(p *payment) {
	c.payments[p.paymentIntent] = p
	c.rep.Payments++
}

// addReversal keeps a refund or dispute of one of this deployment's payments, on its account: the
// payment's, or for one fetched by id, that of the credit naming it (creditAccount).
func (c *driftCheck) addReversal(kind *reversalKind, id string, pi *stripe.PaymentIntent, ch *stripe.Charge, amount int64, currency, status, caseType string, created int64, creditAccount string) {
	o := &reversalObject{kind: kind, id: id, amount: amount, currency: currency, status: status, caseType: caseType,
		created: time.Unix(created, 0), accountID: creditAccount}
	if pi != nil {
		o.paymentIntent = pi.ID
	}
	if ch != nil {
		o.charge = ch.ID
	}
	switch p, order := c.payments[o.paymentIntent], c.byIntent[o.paymentIntent]; {
	case p != nil:
		o.accountID, o.order = p.order.AccountID, p.order
	case order != nil:
		o.accountID, o.order = order.AccountID, order
	case creditAccount == "":
		c.rep.Others++ // a payment that is not ours
		return
	}
	c.reversals[id] = o
}

// readCredits reads the window's money-backed credits and fetches, by id, each Stripe object they name
// that the listing did not hold (a payment made just before the window, a refund that failed days
// after it was made). An object Stripe does not have is drift at once (unknown_payment).
func (c *driftCheck) readCredits(ctx context.Context) error {
	credits, err := db.MoneyCreditsBetween(ctx, c.r.pool, c.rep.Since, c.rep.Until)
	if err != nil {
		return err
	}
	c.credits, c.creditObject = credits, map[int64]string{}
	c.rep.Credits = len(credits)
	var fetchIntents []string
	seen := map[string]bool{}
	for _, e := range credits {
		object := e.PaymentIntent
		switch e.Kind {
		case db.KindRefundRestore:
			object, _ = stripeevents.RestoredRefund(e.DedupeKey)
		case db.KindDisputeWon:
			object, _ = stripeevents.RestoredDispute(e.DedupeKey)
		}
		if object == "" {
			// No Stripe object to look for: its key is all there is to report.
			c.creditObject[e.ID] = e.DedupeKey
			c.unknown(e, e.DedupeKey, "the credit names no Stripe object")
			continue
		}
		c.creditObject[e.ID] = object
		if c.payments[object] != nil || c.reversals[object] != nil || seen[object] {
			continue
		}
		seen[object] = true
		var err error
		switch e.Kind {
		case db.KindTopup:
			fetchIntents = append(fetchIntents, object)
		case db.KindRefundRestore:
			err = c.fetchRefund(ctx, e, object)
		case db.KindDisputeWon:
			err = c.fetchDispute(ctx, e, object)
		}
		if err != nil {
			return err
		}
	}
	if len(fetchIntents) == 0 {
		return nil
	}
	// Their orders first: a fetched payment is checked against its order, as a listed one is.
	if err := c.readOrders(ctx, fetchIntents, nil, nil); err != nil {
		return err
	}
	for _, id := range fetchIntents {
		if err := c.fetchIntent(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// fetchIntent fetches the PaymentIntent a credit names and checks it as a payment, whatever its status.
func (c *driftCheck) fetchIntent(ctx context.Context, id string) error {
	pi, found, err := fetch(c, "PaymentIntent", id, func() (*stripe.PaymentIntent, error) {
		return c.r.stripe.PaymentIntents.Get(id, &stripe.PaymentIntentParams{Params: stripe.Params{Context: ctx}})
	})
	if !found {
		return err
	}
	order := c.byIntent[id]
	if order == nil {
		// The ledger credited it, so it is ours: the order is the credit's.
		order = &db.Topup{AccountID: c.creditAccount(id)}
	}
	c.addPayment(&payment{
		paymentIntent: id, order: order, amount: pi.Amount, currency: string(pi.Currency), status: string(pi.Status),
		created: time.Unix(pi.Created, 0),
	})
	return nil
}

// fetchRefund fetches the refund a restore names and checks it.
func (c *driftCheck) fetchRefund(ctx context.Context, credit db.Entry, id string) error {
	re, found, err := fetch(c, "refund", id, func() (*stripe.Refund, error) {
		return c.r.stripe.Refunds.Get(id, &stripe.RefundParams{Params: stripe.Params{Context: ctx}})
	})
	if found {
		c.addReversal(&refundKind, re.ID, re.PaymentIntent, re.Charge, re.Amount, string(re.Currency), string(re.Status), "", re.Created, credit.AccountID)
	}
	return err
}

// fetchDispute fetches the dispute a won dispute's restore names and checks it.
func (c *driftCheck) fetchDispute(ctx context.Context, credit db.Entry, id string) error {
	d, found, err := fetch(c, "dispute", id, func() (*stripe.Dispute, error) {
		return c.r.stripe.Disputes.Get(id, &stripe.DisputeParams{Params: stripe.Params{Context: ctx}})
	})
	if found {
		c.addReversal(&disputeKind, d.ID, d.PaymentIntent, d.Charge, d.Amount, string(d.Currency), string(d.Status), caseType(d), d.Created, credit.AccountID)
	}
	return err
}

// fetch retrieves one object by id with get. Not found when Stripe answers that it does not exist:
// every credit naming it is drift at once (unknown_payment). Any other failure ends the pass.
func fetch[T any](c *driftCheck, what, id string, get func() (T, error)) (object T, found bool, err error) {
	object, err = get()
	var stripeErr *stripe.Error
	if errors.As(err, &stripeErr) && stripeErr.HTTPStatusCode == http.StatusNotFound {
		c.unknownObject(id)
		return object, false, nil
	}
	if err != nil {
		return object, false, fmt.Errorf("stripe drift: retrieve %s %s: %w", what, id, err)
	}
	c.rep.Retrieved++
	return object, true, nil
}

// caseType is a dispute's card case_type (chargeback, inquiry), empty when it names none.
func caseType(d *stripe.Dispute) string {
	if d.PaymentMethodDetails == nil || d.PaymentMethodDetails.Card == nil {
		return ""
	}
	return string(d.PaymentMethodDetails.Card.CaseType)
}

// unknownObject reports every credit of the window naming an object Stripe does not have.
func (c *driftCheck) unknownObject(object string) {
	var total int64
	var first db.Entry
	for _, e := range c.credits {
		if c.creditObject[e.ID] == object {
			if total == 0 {
				first = e
			}
			total += e.Amount
		}
	}
	first.Amount = total
	c.unknown(first, object, "Stripe has no such object")
}

func (c *driftCheck) unknown(credit db.Entry, object, detail string) {
	c.checked = append(c.checked, object)
	c.rep.Found = append(c.rep.Found, db.Drift{
		AccountID: credit.AccountID, Reason: db.DriftUnknownPayment, ObjectID: object, PaymentIntent: credit.PaymentIntent,
		LedgerAmount: credit.Amount, Detail: fmt.Sprintf("%s credited %d (%s): %s", credit.Kind, credit.Amount, credit.DedupeKey, detail),
		ObjectCreated: credit.CreatedAt,
	})
}

// creditAccount is the account of the window's credit naming object.
func (c *driftCheck) creditAccount(object string) string {
	for _, e := range c.credits {
		if c.creditObject[e.ID] == object {
			return e.AccountID
		}
	}
	return ""
}

// readLedger reads the ledger effects of every object to check: the payments' topup credits and the
// refunds' and disputes' reversals and restores, by their keys.
func (c *driftCheck) readLedger(ctx context.Context) error {
	intents := make([]string, 0, len(c.payments))
	for id := range c.payments {
		intents = append(intents, id)
	}
	credits, err := db.PaymentCredits(ctx, c.r.pool, intents)
	if err != nil {
		return err
	}
	for _, e := range credits {
		p := c.payments[e.PaymentIntent]
		p.credits = append(p.credits, e)
	}
	keys := make([]string, 0, 2*len(c.reversals))
	for _, o := range c.reversals {
		keys = append(keys, o.kind.key(o.id), o.kind.restoreKey(o.id))
	}
	entries, err := db.EntriesByDedupeKeys(ctx, c.r.pool, keys)
	if err != nil {
		return err
	}
	byKey := make(map[string]*db.Entry, len(entries))
	for i := range entries {
		byKey[entries[i].DedupeKey] = &entries[i]
	}
	for _, o := range c.reversals {
		o.reversal, o.restore = byKey[o.kind.key(o.id)], byKey[o.kind.restoreKey(o.id)]
	}
	return nil
}

// match checks every object against its ledger effects, and counts the window's credits whose object
// matched.
func (c *driftCheck) match() {
	c.matched = map[string]string{}
	for _, p := range c.payments {
		c.checked = append(c.checked, p.paymentIntent)
		if d, ok := checkPayment(p); !ok {
			c.rep.Found = append(c.rep.Found, d)
			continue
		}
		keys := make([]string, len(p.credits))
		for i, e := range p.credits {
			keys[i] = e.DedupeKey
		}
		c.matched[p.paymentIntent] = fmt.Sprintf("payment %s %d %s", p.paymentIntent, p.amount, strings.Join(keys, " "))
	}
	for _, o := range c.reversals {
		d, line, moved, ok := checkReversal(o)
		if ok && !moved {
			// Nothing moved, and the ledger holds nothing of it: an inquiry, a refund not yet pending.
			c.rep.Others++
			continue
		}
		c.checked = append(c.checked, o.id)
		if o.kind == &refundKind {
			c.rep.Refunds++
		} else {
			c.rep.Disputes++
		}
		if !ok {
			c.rep.Found = append(c.rep.Found, d)
			continue
		}
		c.matched[o.id] = line
	}
	c.rep.Matched = len(c.matched)
	for _, e := range c.credits {
		if _, ok := c.matched[c.creditObject[e.ID]]; ok {
			c.rep.CreditsMatched++
		}
	}
	slices.SortFunc(c.rep.Found, func(a, b db.Drift) int {
		return cmp.Or(cmp.Compare(a.Reason, b.Reason), cmp.Compare(a.ObjectID, b.ObjectID))
	})
}

// checkPayment: a succeeded payment has exactly one topup credit, of its amount (of the credits its
// order bought, for an order with a price: paid at exactly that price), in its order's currency; a
// payment that did not succeed has none.
func checkPayment(p *payment) (db.Drift, bool) {
	var credited int64
	for _, e := range p.credits {
		credited += e.Amount
	}
	want := p.amount
	if p.order != nil && p.order.Credits != 0 {
		want = p.order.CreditsFor(p.amount)
	}
	d := db.Drift{
		AccountID: p.order.AccountID, ObjectID: p.paymentIntent, PaymentIntent: p.paymentIntent, StripeAmount: p.amount,
		LedgerAmount: credited, Currency: p.currency, ObjectCreated: p.created,
	}
	switch {
	case p.status != string(stripe.PaymentIntentStatusSucceeded):
		d.Reason, d.Detail = db.DriftStatusDiffers, fmt.Sprintf("credited %d, but the payment is %s at Stripe", credited, p.status)
	case len(p.credits) == 0:
		d.Reason, d.Detail = db.DriftMissingCredit, fmt.Sprintf("paid %d %s at Stripe, never credited", p.amount, p.currency)
		if p.order.Status != "" {
			d.Detail += "; the order is " + p.order.Status
		}
	case len(p.credits) > 1:
		d.Reason, d.Detail = db.DriftAmountDiffers, fmt.Sprintf("paid %d once, credited %d times (%d in all)", p.amount, len(p.credits), credited)
	case p.order != nil && p.order.Credits != 0 && p.order.Amount != p.amount:
		d.Reason, d.Detail = db.DriftAmountDiffers, fmt.Sprintf("paid %d at Stripe for an order priced %d", p.amount, p.order.Amount)
	case credited != want:
		d.Reason, d.Detail = db.DriftAmountDiffers, fmt.Sprintf("paid %d at Stripe, credited %d", p.amount, credited)
	case p.order.Currency != "" && !strings.EqualFold(p.order.Currency, p.currency):
		d.Reason, d.Detail = db.DriftAmountDiffers, fmt.Sprintf("paid in %s, credited to an order in %s", p.currency, p.order.Currency)
	default:
		return db.Drift{}, true
	}
	return d, false
}

// checkReversal: a refund or dispute whose state took money back has its reversal, of its amount, and
// its restore exactly when its state gave the money back; one whose state moved nothing has neither.
// moved says it moved money (a match worth a digest line).
func checkReversal(o *reversalObject) (d db.Drift, line string, moved, ok bool) {
	reversed, restored := o.kind.moves(o.status, o.caseType)
	// What the ledger takes back: the credits o.amount bought (the amount itself, 1:1, without an order).
	want := o.amount
	if o.order != nil && o.order.Credits != 0 {
		want = o.order.CreditsFor(o.amount)
	}
	d = db.Drift{
		AccountID: o.accountID, ObjectID: o.id, PaymentIntent: o.paymentIntent, StripeAmount: o.amount,
		Currency: o.currency, ObjectCreated: o.created,
	}
	if o.reversal != nil {
		d.LedgerAmount = -o.reversal.Amount
	}
	switch {
	case !reversed && o.reversal == nil && o.restore == nil:
		return db.Drift{}, "", false, true
	case !reversed:
		d.Reason, d.Detail = db.DriftStatusDiffers, fmt.Sprintf("the ledger holds its %s, but the %s is %s at Stripe, which moves no money", o.kind.reversalEntry, o.kind.name, o.status)
	case o.reversal == nil:
		d.Reason, d.Detail = o.kind.missing, fmt.Sprintf("%s %d %s (%s) at Stripe, nothing taken back", o.kind.name, o.amount, o.currency, o.status)
	case -o.reversal.Amount != want:
		d.Reason, d.Detail = db.DriftAmountDiffers, fmt.Sprintf("%s %d at Stripe, %d taken back", o.kind.name, o.amount, -o.reversal.Amount)
	case restored && o.restore == nil:
		d.Reason, d.Detail = db.DriftStatusDiffers, fmt.Sprintf("the %s is %s at Stripe, but the ledger has no %s", o.kind.name, o.status, o.kind.restoreEntry)
	case !restored && o.restore != nil:
		d.Reason, d.Detail = db.DriftStatusDiffers, fmt.Sprintf("the ledger holds a %s, but the %s is %s at Stripe", o.kind.restoreEntry, o.kind.name, o.status)
	case o.restore != nil && o.restore.Amount != want:
		d.Reason, d.Detail = db.DriftAmountDiffers, fmt.Sprintf("%s %d at Stripe, %d given back", o.kind.name, o.amount, o.restore.Amount)
	default:
		line = fmt.Sprintf("%s %s %d %s", o.kind.name, o.id, o.amount, o.reversal.DedupeKey)
		if o.restore != nil {
			line += " " + o.restore.DedupeKey
		}
		return db.Drift{}, line, true, true
	}
	return d, "", true, false
}

// findRepairs names, for each drift a replay could repair, the newest parked event of its object.
func (c *driftCheck) findRepairs(ctx context.Context) error {
	var intents, objects []string
	for _, d := range c.rep.Found {
		if d.PaymentIntent != "" && d.Reason != db.DriftUnknownPayment {
			intents = append(intents, d.PaymentIntent)
			objects = append(objects, c.eventObjects(d)...)
		}
	}
	if len(intents) == 0 {
		return nil
	}
	events, err := db.ParkedEventsForObjects(ctx, c.r.pool, compact(intents), compact(objects))
	if err != nil {
		return err
	}
	for i := range c.rep.Found {
		d := &c.rep.Found[i]
		for _, e := range events {
			if d.Reason != db.DriftUnknownPayment && e.PaymentIntent == d.PaymentIntent && slices.Contains(c.eventObjects(*d), e.ObjectID) {
				d.EventID = e.EventID
				break
			}
		}
	}
	return nil
}

// eventObjects are the objects whose events would repair d: a payment's session and PaymentIntent, a
// refund and its charge (charge.refunded), a dispute.
func (c *driftCheck) eventObjects(d db.Drift) []string {
	if p := c.payments[d.ObjectID]; p != nil {
		return compact([]string{p.paymentIntent, p.session})
	}
	if o := c.reversals[d.ObjectID]; o != nil {
		return compact([]string{o.id, o.charge})
	}
	return nil
}

// digest is the SHA-256 of the sorted match lines: the same matches give the same digest.
func (c *driftCheck) digest() string {
	lines := make([]string, 0, len(c.matched))
	for _, line := range c.matched {
		lines = append(lines, line)
	}
	slices.Sort(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(sum[:])
}

// compact returns ids without empty strings and repeats, sorted.
func compact(ids []string) []string {
	out := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == "" })
	slices.Sort(out)
	return slices.Compact(out)
}
