package reconcile_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/reconcile"
	"github.com/onceledger/onceledger/internal/stripeevents"
	"github.com/onceledger/onceledger/internal/stripefake"
)

type obj = map[string]any

// driftWorld is a test deployment (test mode) and the fake Stripe it takes payments through: what
// Stripe holds is set on the fake, and the ledger is built by delivering events to the webhook's own
// processor.
type driftWorld struct {
	t      *testing.T
	ctx    context.Context
	pool   *db.Pool
	fake   *stripefake.Server
	events *stripeevents.Processor
	r      *reconcile.Reconciler
	reg    *prometheus.Registry
	// base is the creation time of the first object; each next one is a second later.
	base    time.Time
	created atomic.Int64
	eventN  atomic.Int64
	// held is what Stripe holds, by listing.
	mu   sync.Mutex
	held map[string][]obj
}

func newDriftWorld(t *testing.T, base time.Time) *driftWorld {
	t.Helper()
	pool := dbtest.New(t)
	fake := stripefake.New()
	t.Cleanup(fake.Close)
	sc := stripeevents.NewStripeClient(stripefake.SecretKey, fake.URL, nil)
	testMode := false
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	events := &stripeevents.Processor{Pool: pool, Ledger: dbtest.Ledger(t, pool), Stripe: sc, Livemode: &testMode, Log: log}
	reg := prometheus.NewRegistry()
	r := reconcile.New(reconcile.Deps{
		Pool: pool, Stripe: sc, Events: events, Livemode: &testMode, Metrics: reconcile.NewMetrics(reg),
	}, reconcile.Options{Lookback: 48 * time.Hour})
	return &driftWorld{t: t, ctx: context.Background(), pool: pool, fake: fake, events: events, r: r, reg: reg,
		base: base.Truncate(time.Second), held: map[string][]obj{}}
}

func (w *driftWorld) account(id string) {
	w.t.Helper()
	if _, err := dbtest.Ledger(w.t, w.pool).CreateAccount(w.ctx, id, "usd", 0); err != nil {
		w.t.Fatal(err)
	}
}

// next is the creation time of the next object.
func (w *driftWorld) next() int64 { return w.base.Unix() + w.created.Add(1) }

// hold makes Stripe hold objects (in the listing their "object" names), published by publish.
func (w *driftWorld) hold(objects ...obj) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, o := range objects {
		path := map[string]string{
			"checkout.session": "/v1/checkout/sessions", "payment_intent": "/v1/payment_intents", "refund": "/v1/refunds", "dispute": "/v1/disputes",
		}[o["object"].(string)]
		w.held[path] = append(w.held[path], o)
	}
}

func (w *driftWorld) publish() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for path, objects := range w.held {
		w.fake.SetObjects(path, objects...)
	}
	if n := len(w.held["/v1/checkout/sessions"]) + len(w.held["/v1/payment_intents"]) + len(w.held["/v1/refunds"]) + len(w.held["/v1/disputes"]); n == 0 {
		w.t.Fatal("Stripe holds nothing")
	}
}

// checkout returns a paid Checkout Session and its succeeded PaymentIntent, as Stripe holds them;
// topupID (an order created through the API) is in both metadata, as the API sets it.
func (w *driftWorld) checkout(n, account, topupID string, amount int64, livemode bool) (session, intent obj) {
	metadata := obj{"account_id": account}
	if topupID != "" {
		metadata["topup_id"] = topupID
	}
	session = obj{
		"id": "cs_" + n, "object": "checkout.session", "status": "complete", "payment_status": "paid", "amount_total": amount,
		"currency": "usd", "metadata": metadata, "payment_intent": "pi_" + n, "created": w.next(), "livemode": livemode,
	}
	intentMetadata := obj{}
	if topupID != "" {
		intentMetadata = metadata
	}
	intent = obj{
		"id": "pi_" + n, "object": "payment_intent", "status": "succeeded", "amount": amount, "currency": "usd",
		"metadata": intentMetadata, "created": w.next(), "livemode": livemode,
	}
	return session, intent
}

func (w *driftWorld) refund(id, paymentIntent string, amount int64, status string) obj {
	return obj{
		"id": id, "object": "refund", "amount": amount, "currency": "usd", "status": status,
		"payment_intent": paymentIntent, "charge": "ch_" + paymentIntent, "created": w.next(),
	}
}

func (w *driftWorld) dispute(id, paymentIntent string, amount int64, status, caseType string, livemode bool) obj {
	return obj{
		"id": id, "object": "dispute", "amount": amount, "currency": "usd", "status": status,
		"payment_intent": paymentIntent, "charge": "ch_" + paymentIntent, "created": w.next(), "livemode": livemode,
		"payment_method_details": obj{"type": "card", "card": obj{"brand": "visa", "case_type": caseType}},
	}
}

// event is a Stripe event of eventType around object, with a fresh id.
func (w *driftWorld) event(eventType string, object obj) []byte {
	return stripefake.Event(fmt.Sprintf("evt_%d", w.eventN.Add(1)), eventType, "2024-06-20", object)
}

// deliver hands each event to the webhook's processor, eight at a time, as concurrent deliveries.
func (w *driftWorld) deliver(events ...[]byte) {
	w.t.Helper()
	var wg sync.WaitGroup
	next := make(chan []byte)
	errs := make(chan error, len(events))
	for range 8 {
		wg.Go(func() {
			for raw := range next {
				res, err := w.events.Process(w.ctx, raw)
				switch {
				case err != nil:
					errs <- err
				case res.Outcome == stripeevents.OutcomeParked:
					errs <- fmt.Errorf("event %s parked %s", res.EventID, res.Parked)
				}
			}
		})
	}
	for _, e := range events {
		next <- e
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		w.t.Fatal(err)
	}
}

func (w *driftWorld) check(since, until time.Time) reconcile.DriftReport {
	w.t.Helper()
	rep, err := w.r.CheckStripe(w.ctx, since, until)
	if err != nil {
		w.t.Fatalf("drift pass: %v", err)
	}
	return rep
}

// checkConcurrently runs n passes over the window at once.
func (w *driftWorld) checkConcurrently(n int, since, until time.Time) []reconcile.DriftReport {
	w.t.Helper()
	reps := make([]reconcile.DriftReport, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { reps[i], errs[i] = w.r.CheckStripe(w.ctx, since, until) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			w.t.Fatalf("drift pass: %v", err)
		}
	}
	return reps
}

// rows returns every stripe_drift row, open or not, keyed "reason object".
func (w *driftWorld) rows() map[string]db.Drift {
	w.t.Helper()
	open, err := db.OpenDrift(w.ctx, w.pool, 1000)
	if err != nil {
		w.t.Fatal(err)
	}
	resolved, err := db.ResolvedDriftSince(w.ctx, w.pool, time.Now().Add(-time.Hour), 1000)
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string]db.Drift{}
	for _, d := range slices.Concat(open, resolved) {
		out[d.Reason+" "+d.ObjectID] = d
	}
	return out
}

func (w *driftWorld) checkpoints() []db.DriftCheckpoint {
	w.t.Helper()
	list, err := db.DriftCheckpoints(w.ctx, w.pool, 100)
	if err != nil {
		w.t.Fatal(err)
	}
	return list
}

// gauge reads onceledger_stripe_drift per reason.
func (w *driftWorld) gauge() map[string]float64 {
	w.t.Helper()
	families, err := w.reg.Gather()
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "onceledger_stripe_drift" {
			continue
		}
		for _, m := range f.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	return out
}

func found(rep reconcile.DriftReport) []string {
	var out []string
	for _, d := range rep.Found {
		out = append(out, d.Reason+" "+d.ObjectID)
	}
	return out
}

// A fake Stripe holding 1,000 objects over several pages, five discrepancies planted among them (a
// payment never credited, an amount that differs, a refund never taken back, a chargeback never taken
// back, and a ledger credit of a payment Stripe never had): the pass finds exactly those five, and
// three runs record each once. Objects of another deployment (another mode, or metadata naming orders
// this one does not hold) are not reported, though each would be drift if it were taken for ours. A
// Checkout Session and its PaymentIntent are one payment. Once the missing events are delivered
// (recovery of the missed one, Stripe's retries of the others), the next pass resolves those three.
func TestDriftFindsExactlyThePlantedDiscrepanciesOnce(t *testing.T) {
	t.Parallel()
	now := time.Now()
	w := newDriftWorld(t, now.Add(-40*time.Minute))
	since, until := now.Add(-time.Hour), now.Add(time.Hour)
	for i := range 10 {
		w.account(fmt.Sprintf("acct_%d", i))
	}

	// 350 Checkout payments (700 objects: a session and its PaymentIntent each), credited through the
	// webhook, except two.
	var credits [][]byte
	var payments []string
	for i := range 350 {
		n, account, amount := fmt.Sprint(i), fmt.Sprintf("acct_%d", i%10), int64(1000+i)
		switch i {
		case 7: // never credited: an order the API created, its completion never delivered
			n = "missing"
		case 8: // credited 4,000 by its event, 5,000 at Stripe
			n, amount = "amount", 5000
		}
		session, intent := w.checkout(n, account, map[bool]string{true: "top_missing"}[n == "missing"], amount, false)
		w.hold(session, intent)
		switch n {
		case "missing":
			if _, _, err := db.InsertPendingTopup(w.ctx, w.pool, db.Topup{ID: "top_missing", AccountID: account, Amount: amount, Currency: "usd"}); err != nil {
				t.Fatal(err)
			}
			if _, err := db.SetTopupSession(w.ctx, w.pool, "top_missing", "cs_missing", "https://checkout.stripe.com/c/pay/cs_missing"); err != nil {
				t.Fatal(err)
			}
			// Stripe lists it among the events whose delivery failed.
			w.fake.SetEvents(w.event("checkout.session.completed", session))
			continue
		case "amount":
			session = maps(session, obj{"amount_total": int64(4000)})
		}
		credits = append(credits, w.event("checkout.session.completed", session))
		payments = append(payments, "pi_"+n)
	}
	// A credit whose payment Stripe never had.
	ghost, _ := w.checkout("ghost", "acct_2", "", 2500, false)
	credits = append(credits, w.event("checkout.session.completed", ghost))
	w.deliver(credits...)

	// 150 refunds: 120 succeeded, 20 failed (taken back and given back), 10 pending; one never taken back.
	var reversals [][]byte
	var refundMissing obj
	for i := range 150 {
		status := "succeeded"
		switch {
		case i < 20:
			status = "failed"
		case i < 30:
			status = "pending"
		}
		id := fmt.Sprintf("re_%d", i)
		if i == 42 {
			id = "re_missing"
		}
		re := w.refund(id, payments[(i*3)%len(payments)], 100, status)
		w.hold(re)
		if id == "re_missing" {
			refundMissing = re
			continue
		}
		reversals = append(reversals, w.event("charge.refund.updated", re))
	}
	// 50 disputes: 35 chargebacks awaiting a response (one never taken back), 10 won, 5 inquiries.
	var disputeMissing obj
	for i := range 50 {
		status, caseType, eventType := "needs_response", "chargeback", "charge.dispute.created"
		switch {
		case i < 10:
			status, eventType = "won", "charge.dispute.closed"
		case i < 15:
			status, caseType = "warning_needs_response", "inquiry"
		}
		id := fmt.Sprintf("dp_%d", i)
		if i == 20 {
			id = "dp_missing"
		}
		dp := w.dispute(id, payments[(i*7+1)%len(payments)], 300, status, caseType, false)
		w.hold(dp)
		if id == "dp_missing" {
			disputeMissing = dp
			continue
		}
		reversals = append(reversals, w.event(eventType, dp))
	}
	w.deliver(reversals...)

	// 100 objects of another deployment on the same Stripe account.
	for i := range 40 { // its own orders
		_, intent := w.checkout(fmt.Sprintf("theirs_%d", i), "acct_1", fmt.Sprintf("top_theirs_%d", i), 700, false)
		w.hold(intent)
	}
	for i := range 10 { // an order id of ours (a session this deployment recorded), another account
		_, intent := w.checkout(fmt.Sprintf("theirs_same_id_%d", i), "acct_elsewhere", "cs_"+fmt.Sprint(100+i), 700, false)
		w.hold(intent)
	}
	for i := range 20 { // sessions naming only an account, of payments this deployment never recorded
		session, _ := w.checkout(fmt.Sprintf("theirs_s_%d", i), "acct_1", "", 700, false)
		w.hold(session)
	}
	for i := range 10 { // live mode, naming our order that was never credited
		session, _ := w.checkout(fmt.Sprintf("live_%d", i), "acct_7", "top_missing", 1007, true)
		w.hold(session)
	}
	for i := range 10 { // live mode chargebacks of payments of ours
		w.hold(w.dispute(fmt.Sprintf("dp_live_%d", i), payments[i], 300, "needs_response", "chargeback", true))
	}
	for i := range 10 { // refunds of their payments
		w.hold(w.refund(fmt.Sprintf("re_theirs_%d", i), fmt.Sprintf("pi_theirs_%d", i), 100, "succeeded"))
	}
	w.publish()

	want := []string{"amount_differs pi_amount", "missing_credit pi_missing", "missing_dispute dp_missing", "missing_refund re_missing", "unknown_payment pi_ghost"}
	var first map[string]db.Drift
	for run := 1; run <= 3; run++ {
		rep := w.check(since, until)
		if got := found(rep); !slices.Equal(got, want) {
			t.Fatalf("run %d found %v, want %v", run, got, want)
		}
		if rep.Listed != 1000 || rep.Payments != 350 || rep.Refunds != 150 || rep.Disputes != 45 || rep.Others != 105 {
			t.Fatalf("run %d: listed %d (payments %d, refunds %d, disputes %d, others %d); want 1,000 (350, 150, 45, 105)",
				run, rep.Listed, rep.Payments, rep.Refunds, rep.Disputes, rep.Others)
		}
		// 350 topups (349 and the ghost's), 20 refund restores, 10 won disputes; the ghost's and the
		// amount's do not match.
		if rep.Credits != 380 || rep.CreditsMatched != 378 || rep.Matched != 541 {
			t.Fatalf("run %d: credits %d (%d matched), objects matched %d; want 380 (378), 541", run, rep.Credits, rep.CreditsMatched, rep.Matched)
		}
		if rep.Checkpoint != nil || rep.Resolved != 0 {
			t.Fatalf("run %d: checkpoint %v, resolved %d; a window with drift has neither", run, rep.Checkpoint, rep.Resolved)
		}
		rows := w.rows()
		if len(rows) != len(want) {
			t.Fatalf("run %d: stripe_drift holds %d rows, want %d: %v", run, len(rows), len(want), rows)
		}
		if run == 1 {
			first = rows
			continue
		}
		// The same rows, seen again: found when first found, last seen by this run.
		for key, d := range rows {
			if !d.FoundAt.Equal(first[key].FoundAt) || !d.LastSeenAt.After(first[key].LastSeenAt) || d.ResolvedAt != nil {
				t.Fatalf("run %d: %s found at %s (first %s), last seen %s (first %s), resolved %v",
					run, key, d.FoundAt, first[key].FoundAt, d.LastSeenAt, first[key].LastSeenAt, d.ResolvedAt)
			}
		}
	}
	rows := w.rows()
	if d := rows["amount_differs pi_amount"]; d.StripeAmount != 5000 || d.LedgerAmount != 4000 || d.AccountID != "acct_8" {
		t.Fatalf("amount_differs: %+v", d)
	}
	if d := rows["missing_credit pi_missing"]; d.StripeAmount != 1007 || d.LedgerAmount != 0 || d.AccountID != "acct_7" || d.EventID != "" {
		t.Fatalf("missing_credit: %+v (its event was never stored)", d)
	}
	if d := rows["unknown_payment pi_ghost"]; d.StripeAmount != 0 || d.LedgerAmount != 2500 || d.AccountID != "acct_2" {
		t.Fatalf("unknown_payment: %+v", d)
	}
	if g := w.gauge(); g["missing_credit"] != 1 || g["amount_differs"] != 1 || g["unknown_payment"] != 1 ||
		g["missing_refund"] != 1 || g["missing_dispute"] != 1 || g["status_differs"] != 0 {
		t.Fatalf("onceledger_stripe_drift = %v", g)
	}
	// Every listing was paged (100 a page) over the window's created range.
	intentPages := w.fake.ListQueries("/v1/payment_intents")
	if len(intentPages) != 3*4 {
		t.Fatalf("%d pages of PaymentIntents asked for in three runs, want 4 a run", len(intentPages))
	}
	for _, path := range []string{"/v1/checkout/sessions", "/v1/payment_intents", "/v1/refunds", "/v1/disputes"} {
		q := w.fake.ListQueries(path)[0]
		if q.Get("limit") != "100" || q.Get("created[gte]") != fmt.Sprint(since.Unix()) || q.Get("created[lt]") != fmt.Sprint(until.Unix()) {
			t.Fatalf("%s asked for with %v", path, q)
		}
	}

	// The repairs: recovery applies the missed completion; Stripe's retries deliver the refund and the
	// chargeback.
	if rec, err := w.r.Recover(w.ctx); err != nil || rec.Applied != 1 {
		t.Fatalf("recovery: %+v %v", rec, err)
	}
	w.deliver(w.event("refund.updated", refundMissing), w.event("charge.dispute.created", disputeMissing))
	rep := w.check(since, until)
	if got, want := found(rep), []string{"amount_differs pi_amount", "unknown_payment pi_ghost"}; !slices.Equal(got, want) || rep.Resolved != 3 {
		t.Fatalf("after the repairs found %v (resolved %d), want %v (3 resolved)", got, rep.Resolved, want)
	}
	rows = w.rows()
	for _, key := range []string{"missing_credit pi_missing", "missing_refund re_missing", "missing_dispute dp_missing"} {
		if rows[key].ResolvedAt == nil {
			t.Fatalf("%s is still open", key)
		}
	}
	if len(rows) != 5 || rep.Checkpoint != nil || len(w.checkpoints()) != 0 {
		t.Fatalf("%d rows, checkpoint %v: want the same five rows and no checkpoint while two are open", len(rows), rep.Checkpoint)
	}
	if g := w.gauge(); g["missing_credit"] != 0 || g["amount_differs"] != 1 || g["unknown_payment"] != 1 {
		t.Fatalf("onceledger_stripe_drift after the repairs = %v", g)
	}
}

// maps returns o with the fields of with set.
func maps(o, with obj) obj {
	out := obj{}
	for k, v := range o {
		out[k] = v
	}
	for k, v := range with {
		out[k] = v
	}
	return out
}

// A window with one payment never credited: after its missed event is recovered, the window is clean
// and a checkpoint records it, with the objects and credits matched and a digest; re-running it adds
// no checkpoint and gives the same digest, and passes running at once record each thing once. A credit posted in the window for a payment Stripe created
// before it is matched by fetching that PaymentIntent; a failed refund's restore and a won dispute's
// are matched to their objects.
func TestDriftCleanWindowIsCheckpointedOnce(t *testing.T) {
	t.Parallel()
	now := time.Now()
	w := newDriftWorld(t, now.Add(-20*time.Minute))
	since, until := now.Add(-30*time.Minute), now.Add(30*time.Minute)
	w.account("acct_a")

	var credits [][]byte
	for i := range 10 {
		session, intent := w.checkout(fmt.Sprint(i), "acct_a", "", 2000, false)
		w.hold(session, intent)
		credits = append(credits, w.event("checkout.session.completed", session))
	}
	missing, missingIntent := w.checkout("missing", "acct_a", "top_missing", 900, false)
	w.hold(missing, missingIntent)
	if _, _, err := db.InsertPendingTopup(w.ctx, w.pool, db.Topup{ID: "top_missing", AccountID: "acct_a", Amount: 900, Currency: "usd"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetTopupSession(w.ctx, w.pool, "top_missing", "cs_missing", "https://checkout.stripe.com/c/pay/cs_missing"); err != nil {
		t.Fatal(err)
	}
	w.fake.SetEvents(w.event("checkout.session.completed", missing))
	// Paid an hour before the window, credited in it.
	early, earlyIntent := w.checkout("early", "acct_a", "", 700, false)
	early["created"], earlyIntent["created"] = since.Add(-time.Hour).Unix(), since.Add(-time.Hour).Unix()
	w.hold(early, earlyIntent)
	credits = append(credits, w.event("checkout.session.completed", early))
	w.deliver(credits...)

	failed, refunded := w.refund("re_failed", "pi_1", 500, "failed"), w.refund("re_ok", "pi_2", 300, "succeeded")
	won := w.dispute("dp_won", "pi_3", 2000, "won", "chargeback", false)
	w.hold(failed, refunded, won)
	w.deliver(w.event("refund.failed", failed), w.event("charge.refund.updated", refunded), w.event("charge.dispute.closed", won))
	w.publish()

	rep := w.checkConcurrently(4, since, until)[0]
	if n := len(w.rows()); n != 1 {
		t.Fatalf("four concurrent passes recorded %d rows, want the one drift", n)
	}
	if got := found(rep); !slices.Equal(got, []string{"missing_credit pi_missing"}) || rep.Checkpoint != nil {
		t.Fatalf("found %v, checkpoint %v; want the missing credit alone, no checkpoint", got, rep.Checkpoint)
	}
	if rep.Retrieved != 1 || rep.Payments != 12 {
		t.Fatalf("retrieved %d, payments %d; want the early payment fetched by id, 12 payments", rep.Retrieved, rep.Payments)
	}

	if rec, err := w.r.Recover(w.ctx); err != nil || rec.Applied != 1 {
		t.Fatalf("recovery: %+v %v", rec, err)
	}
	// Four passes at once (serve's and operators'): one resolves the drift and records the checkpoint.
	reps := w.checkConcurrently(4, since, until)
	var resolved int64
	var checkpointed int
	for _, r := range reps {
		resolved += r.Resolved
		if r.Checkpointed {
			checkpointed++
			rep = r
		}
		if len(r.Found) != 0 || r.Checkpoint == nil {
			t.Fatalf("after the recovery a pass found %v, checkpoint %v", found(r), r.Checkpoint)
		}
	}
	if resolved != 1 || checkpointed != 1 {
		t.Fatalf("concurrent passes resolved %d and recorded %d checkpoints, want 1 and 1", resolved, checkpointed)
	}
	// 12 payments, 2 refunds, 1 dispute; 12 topups, a refund restore and a won dispute.
	c := *rep.Checkpoint
	if c.Objects != 15 || c.Credits != 14 || len(c.Digest) != 64 || !c.WindowStart.Equal(since.Truncate(time.Second)) {
		t.Fatalf("checkpoint %+v; want 15 objects, 14 credits, a SHA-256, the window", c)
	}
	if d := w.rows()["missing_credit pi_missing"]; d.ResolvedAt == nil {
		t.Fatal("the missing credit is still open")
	}
	if g := w.gauge(); g["missing_credit"] != 0 {
		t.Fatalf("onceledger_stripe_drift = %v", g)
	}

	again := w.check(since, until)
	if again.Checkpointed || again.Checkpoint == nil || again.Digest != c.Digest || again.Checkpoint.Digest != c.Digest ||
		!again.Checkpoint.CreatedAt.Equal(c.CreatedAt) {
		t.Fatalf("re-run: checkpointed %t, checkpoint %+v; want the first one kept, digest %s", again.Checkpointed, again.Checkpoint, c.Digest)
	}
	if n := len(w.checkpoints()); n != 1 {
		t.Fatalf("%d checkpoints, want 1", n)
	}
}

// A Stripe outage fails the pass and records nothing (no drift, no checkpoint, no resolution), while
// the webhook goes on crediting: the pass is never in its way.
func TestDriftStripeOutageRecordsNothingAndDelaysNoCredit(t *testing.T) {
	t.Parallel()
	now := time.Now()
	w := newDriftWorld(t, now.Add(-20*time.Minute))
	w.account("acct_a")
	session, intent := w.checkout("1", "acct_a", "", 1500, false)
	w.hold(session, intent, w.refund("re_missing", "pi_1", 100, "succeeded"))
	w.publish()
	w.deliver(w.event("checkout.session.completed", session))

	w.fake.FailWith(http.StatusServiceUnavailable)
	if _, err := w.r.CheckStripe(w.ctx, now.Add(-time.Hour), now.Add(time.Hour)); err == nil {
		t.Fatal("the pass succeeded while Stripe was down")
	}
	later, laterIntent := w.checkout("2", "acct_a", "", 800, false)
	w.hold(later, laterIntent)
	w.deliver(w.event("checkout.session.completed", later))
	acct, err := db.GetAccount(w.ctx, w.pool, "acct_a")
	if err != nil || acct.Balance != 2300 {
		t.Fatalf("balance %d (%v): the credits must not wait for Stripe", acct.Balance, err)
	}
	if rows := w.rows(); len(rows) != 0 || len(w.checkpoints()) != 0 {
		t.Fatalf("a failed pass recorded %v and %d checkpoints", rows, len(w.checkpoints()))
	}

	w.fake.FailWith(0)
	w.publish()
	rep := w.check(now.Add(-time.Hour), now.Add(time.Hour))
	if got := found(rep); !slices.Equal(got, []string{"missing_refund re_missing"}) {
		t.Fatalf("after the outage found %v", got)
	}
}

// The scheduled pass checks every complete UTC day of the last week, each its own window, and records a
// checkpoint for each clean one (an empty day is clean too); the next run skips the days checkpointed.
func TestDriftScheduledPassChecksEachDayOnce(t *testing.T) {
	t.Parallel()
	now := time.Now()
	yesterday := now.Add(-time.Hour).UTC().Truncate(24*time.Hour).AddDate(0, 0, -1)
	w := newDriftWorld(t, yesterday.Add(12*time.Hour))
	w.account("acct_a")
	session, intent := w.checkout("1", "acct_a", "", 1500, false)
	w.hold(session, intent)
	w.publish()
	w.deliver(w.event("checkout.session.completed", session))

	reps, err := w.r.CheckStripeDays(w.ctx, now)
	if err != nil || len(reps) != 7 {
		t.Fatalf("%d windows checked (%v), want 7", len(reps), err)
	}
	for _, rep := range reps {
		if rep.Until.Sub(rep.Since) != 24*time.Hour || rep.Checkpoint == nil || !rep.Checkpointed {
			t.Fatalf("window %s–%s: checkpoint %v", rep.Since, rep.Until, rep.Checkpoint)
		}
	}
	if last := reps[6]; !last.Since.Equal(yesterday) || last.Matched != 1 || last.Checkpoint.Objects != 1 {
		t.Fatalf("yesterday's window %s matched %d, want the one payment", last.Since, last.Matched)
	}
	reps, err = w.r.CheckStripeDays(w.ctx, now)
	if err != nil || len(reps) != 0 {
		t.Fatalf("the next run checked %d windows (%v), want none", len(reps), err)
	}
	if n := len(w.checkpoints()); n != 7 {
		t.Fatalf("%d checkpoints, want 7", n)
	}
}

// A priced order (1000 credits for 333) paid at its price and then partly refunded is no drift: the
// payment is checked against the order's price and its credits, the refund against the credits its
// money bought (111 of 333: 333 credits).
func TestDriftPricedOrderAndItsPartialRefundAreClean(t *testing.T) {
	t.Parallel()
	now := time.Now()
	w := newDriftWorld(t, now.Add(-20*time.Minute))
	since, until := now.Add(-30*time.Minute), now.Add(30*time.Minute)
	w.account("acct_p")
	if _, _, err := db.InsertPendingTopup(w.ctx, w.pool, db.Topup{ID: "top_p", AccountID: "acct_p", Amount: 333, Credits: 1000, Currency: "usd"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetTopupSession(w.ctx, w.pool, "top_p", "cs_p", "https://checkout.stripe.com/c/pay/cs_p"); err != nil {
		t.Fatal(err)
	}
	session, intent := w.checkout("p", "acct_p", "top_p", 333, false)
	refund := w.refund("re_p", "pi_p", 111, "succeeded")
	w.hold(session, intent, refund)
	w.deliver(w.event("checkout.session.completed", session))
	w.deliver(w.event("charge.refund.updated", refund))
	w.publish()
	if b := balanceOf(t, w, "acct_p"); b != 1000-333 {
		t.Fatalf("balance %d, want 667", b)
	}
	if rep := w.check(since, until); len(rep.Found) != 0 || rep.Checkpoint == nil {
		t.Fatalf("found %v; want a clean, checkpointed window", found(rep))
	}
}

func balanceOf(t *testing.T, w *driftWorld, account string) int64 {
	t.Helper()
	acct, err := db.GetAccount(w.ctx, w.pool, account)
	if err != nil {
		t.Fatal(err)
	}
	return acct.Balance
}
