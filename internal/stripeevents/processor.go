// Package stripeevents applies a verified Stripe event to the ledger. It is the one code path behind
// the webhook, `onceledger replay` and the reconciler's recovery of missed events: however often and
// in whatever order an event arrives, its effects are posted once, because every effect has its own
// dedupe key and the event is recorded in the transaction that applies it.
package stripeevents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/stripe/stripe-go/v79/client"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/tracing"
)

var (
	// ErrInvalidEvent: the body is not a Stripe event this package can read. Nothing was written.
	ErrInvalidEvent = errors.New("invalid stripe event")
	// ErrStripeUnavailable: the Stripe API could not answer now (unreachable, 429, 5xx). Nothing was
	// written; a later delivery or replay will apply the event.
	ErrStripeUnavailable = errors.New("stripe API temporarily unavailable")
)

// Outcomes, as stripe_events_outcome_check knows them.
const (
	OutcomeApplied  = "applied"
	OutcomeRecorded = "recorded"
	OutcomeIgnored  = "ignored"
	OutcomeParked   = "parked"
)

// Parking reasons, as stripe_events_parked_reason_check knows them. A parked event is kept, answered
// 200 (Stripe stops retrying) and re-applied later: automatically for unknown_payment, by
// `onceledger replay` for the others.
const (
	ReasonUnknownPayment        = "unknown_payment"
	ReasonUnknownAccount        = "unknown_account"
	ReasonCurrencyMismatch      = "currency_mismatch"
	ReasonDedupeConflict        = "dedupe_conflict"
	ReasonRefundListUnavailable = "refund_list_unavailable"
	// ReasonAmountOutOfRange: an amount above db.MaxAmount, or one that would carry the account's
	// balance beyond a bigint. Moving it would halt (or wrap) the account's money; it waits for an
	// operator instead.
	ReasonAmountOutOfRange = "amount_out_of_range"
	// ReasonLivemodeMismatch: a test-mode event on a live deployment, or the reverse. It moves no
	// money whatever it says: a test card must never buy real credits.
	ReasonLivemodeMismatch = "livemode_mismatch"
	// ReasonAmountMismatch: a session completed with another amount or currency than its order. The
	// order is the contract: never credited silently.
	ReasonAmountMismatch = "amount_mismatch"
	// ReasonOrderExpired: a session completed for an order that had expired. Stripe does not complete
	// an expired session, so a signed event saying it did is investigated, never credited.
	ReasonOrderExpired = "order_expired"
)

// Processor applies Stripe events.
type Processor struct {
	Pool *db.Pool
	// Ledger posts every entry, so that its side effects ride in the same transaction.
	Ledger *db.Ledger
	// Stripe lists a charge's refunds for charge.refunded; nil when no API key is configured.
	Stripe *client.API
	// Reapply re-applies after commit the parked events a top-up cannot re-apply without calling
	// Stripe (through the process's River client); nil leaves them parked for `onceledger replay`.
	Reapply *Reapplier
	// Livemode is the deployment's mode (config.Config.Livemode): an event of the other mode is parked
	// livemode_mismatch. Nil accepts both.
	Livemode *bool
	Log      *slog.Logger
	// Tracing makes a span of each processing step (nil: off).
	Tracing *tracing.Tracing
}

// Result is what one delivery or replay did.
type Result struct {
	EventID string
	// Type is the event's type, once it could be read.
	Type string
	// Duplicate: the event was already recorded, and nothing was done.
	Duplicate bool
	// Outcome is the event's recorded outcome (empty for a duplicate).
	Outcome string
	// Credited: a top-up was newly credited.
	Credited bool
	// Reversed counts refund and dispute reversals newly posted; Restored counts refund restores and
	// won disputes newly posted. Both include events this one un-parked.
	Reversed int
	Restored int
	// Parked is the parking reason, when the event was parked.
	Parked string
}

// Process records and applies one verified event (the raw event JSON). The event row and its effects
// commit together or not at all; a redelivered event is a Duplicate and does nothing. Errors are
// ErrInvalidEvent, ErrStripeUnavailable, or database errors (db.IsTransient ones deserve a retry);
// parking is not an error.
func (p *Processor) Process(ctx context.Context, raw []byte) (res Result, err error) {
	ctx, span := p.Tracing.Start(ctx, "stripe_event.process")
	defer func() { endStep(span, res, err) }()
	ev, err := parseEvent(raw)
	if err != nil {
		return Result{}, err
	}
	if res, done, err := p.payCheckout(ctx, ev, raw); done {
		return res, err
	}
	// Applying an event may need Stripe first (a refund list, a charge's payment, a saved card); a
	// redelivery needs nothing, and must be a duplicate while Stripe is down, and cost Stripe no call
	// while it is up. A committed row proves it; db.RecordEvent below still decides for a delivery that
	// arrives while the first is in flight.
	recorded, err := db.EventRecorded(ctx, p.Pool, ev.ID)
	if err != nil {
		return Result{EventID: ev.ID, Type: ev.Type}, err
	}
	if recorded {
		return p.duplicate(ctx, ev), nil
	}
	f, err := p.prefetch(ctx, &ev)
	if err != nil {
		return Result{EventID: ev.ID, Type: ev.Type}, err
	}
	var (
		out       outcome
		duplicate bool
	)
	err = db.InTx(ctx, p.Pool, func(tx db.Tx) error {
		// Recorded first: a concurrent delivery of the same event waits here and then finds it.
		// Recorded as applied to its payment: what most events turn out to be, so that only the others
		// need their outcome written again below.
		recorded := outcome{status: OutcomeApplied, paymentIntent: ev.paymentIntent()}
		var err error
		recordCtx, span := p.Tracing.Start(ctx, "stripe_event.record")
		duplicate, err = db.RecordEvent(recordCtx, tx, ev.stored(raw, recorded.status, recorded.paymentIntent))
		span.End()
		if err != nil || duplicate {
			return err
		}
		effectCtx, span := p.Tracing.Start(ctx, "stripe_event.effect")
		defer span.End()
		if out, err = p.apply(effectCtx, tx, ev, f); err != nil {
			return err
		}
		if out.status == recorded.status && out.reason == "" && (out.paymentIntent == "" || out.paymentIntent == recorded.paymentIntent) {
			return nil
		}
		return setOutcome(effectCtx, tx, ev.ID, out)
	})
	if err != nil {
		return Result{EventID: ev.ID, Type: ev.Type}, fmt.Errorf("event %s (%s): %w", ev.ID, ev.Type, err)
	}
	if duplicate {
		return p.duplicate(ctx, ev), nil
	}
	p.logOutcome(ctx, "stripe event", ev, out)
	return out.result(ev), nil
}

// stored is the event as it is recorded, with its first outcome.
func (e event) stored(raw []byte, outcome, paymentIntent string) db.Event {
	return db.Event{
		ID: e.ID, Type: e.Type, APIVersion: e.APIVersion, Livemode: e.Livemode, Created: e.createdAt(),
		Payload: raw, Outcome: outcome, PaymentIntent: paymentIntent,
	}
}

// duplicate answers an event that was already recorded: nothing was done.
func (p *Processor) duplicate(ctx context.Context, ev event) Result {
	p.Log.InfoContext(ctx, "stripe event duplicate", "event", ev.ID, "type", ev.Type)
	return Result{EventID: ev.ID, Type: ev.Type, Duplicate: true}
}

// Replay re-applies a stored event through the same effects as its first delivery, and records the new
// outcome. Every effect is keyed, so replaying an applied event posts nothing; replaying a parked one
// after its cause was fixed applies it. A never-received event is db.ErrNotFound.
func (p *Processor) Replay(ctx context.Context, eventID string) (res Result, err error) {
	ctx, span := p.Tracing.Start(ctx, "stripe_event.replay")
	defer func() { endStep(span, res, err) }()
	ev, out, err := p.reapply(ctx, eventID, nil)
	if err != nil {
		return Result{EventID: eventID}, err
	}
	p.logOutcome(ctx, "stripe event replayed", ev, out)
	return out.result(ev), nil
}

// DryRun is what a replay would do now, without doing it.
type DryRun struct {
	// Result is the replay's result: its outcome, parking reason and counts.
	Result Result
	// Entries are the entries the replay would post, in posting order, each with the balance its
	// account would have after it. Empty when a replay would post nothing.
	Entries []db.Entry
}

// DryRun runs Replay's code path in a transaction that is always rolled back, and returns what it
// posted there: the entries a replay would post now. Entries are collected as they are posted
// (OnPosted) and, before the rollback, kept only if the ledger inside the transaction still holds them
// (an effect that parks rolls its savepoint back). Nothing is kept, not even the postings' side effects
// (OnPosted's work rolls back with the rest), and no posting is counted (Observe). The answer can
// differ from a later replay only if the ledger changes in between; replaying stays safe, since every
// effect is keyed. A never-received event is db.ErrNotFound.
func (p *Processor) DryRun(ctx context.Context, eventID string) (DryRun, error) {
	var posted []db.Entry
	dry := *p
	dry.Ledger = p.Ledger.Collecting(func(entries []db.Entry) { posted = append(posted, entries...) })
	var kept []db.Entry
	ev, out, err := dry.reapply(ctx, eventID, func(tx db.Tx) error {
		ids := make([]int64, len(posted))
		for i, e := range posted {
			ids[i] = e.ID
		}
		present, err := db.PresentEntryIDs(ctx, tx, ids)
		if err != nil {
			return err
		}
		for _, e := range posted {
			if present[e.ID] {
				kept = append(kept, e)
			}
		}
		return errRolledBack
	})
	if err != nil {
		return DryRun{Result: Result{EventID: eventID}}, err
	}
	return DryRun{Result: out.result(ev), Entries: kept}, nil
}

// errRolledBack ends a dry run's transaction: InTx rolls back on any error.
var errRolledBack = errors.New("dry run: rolled back")

// reapply applies a stored event again and records its outcome in one transaction, with the record of
// the request that asked for it (db.PendingAudit: the console's replay). finish, when set, runs last in
// that transaction; the transaction commits only when there is none, and a dry run's finish ends it
// with errRolledBack.
func (p *Processor) reapply(ctx context.Context, eventID string, finish func(tx db.Tx) error) (event, outcome, error) {
	stored, err := db.GetEvent(ctx, p.Pool, eventID)
	if err != nil {
		return event{}, outcome{}, err
	}
	ev, err := parseEvent(stored.Payload)
	if err != nil {
		return event{}, outcome{}, err
	}
	f, err := p.prefetch(ctx, &ev)
	if err != nil {
		return event{}, outcome{}, err
	}
	var out outcome
	err = db.InAuditedTx(ctx, p.Pool, func(tx db.Tx) (bool, error) {
		ctx, span := p.Tracing.Start(ctx, "stripe_event.effect")
		defer span.End()
		// Locked so that a top-up un-parking this event at the same time skips it.
		if err := db.LockEvent(ctx, tx, eventID); err != nil {
			return false, err
		}
		if out, err = p.apply(ctx, tx, ev, f); err != nil {
			return false, err
		}
		if err := setOutcome(ctx, tx, ev.ID, out); err != nil {
			return false, err
		}
		if finish != nil {
			return false, finish(tx)
		}
		return true, nil
	})
	if err != nil && !errors.Is(err, errRolledBack) {
		return event{}, outcome{}, fmt.Errorf("replay %s (%s): %w", ev.ID, ev.Type, err)
	}
	return ev, out, nil
}

// outcome is what applying one event did, before it is recorded.
type outcome struct {
	status        string
	reason        string
	paymentIntent string
	credited      bool
	reversed      int
	restored      int
	// posted are the dedupe keys of the entries newly posted, for the log.
	posted []string
	// unparked are the events re-applied because this one recorded their payment; deferred the ones
	// left to a job after commit because they need Stripe.
	unparked []string
	deferred []string
}

func (o outcome) result(ev event) Result {
	return Result{
		EventID: ev.ID, Type: ev.Type, Outcome: o.status, Credited: o.credited,
		Reversed: o.reversed, Restored: o.restored, Parked: o.reason,
	}
}

// parked is how an effect asks for its event to be parked: the effects' savepoint is rolled back, so a
// parked event has posted nothing, and the event row records the reason.
type parked struct {
	reason        string
	paymentIntent string
	cause         error
}

func (p *parked) Error() string {
	if p.cause != nil {
		return "parked " + p.reason + ": " + p.cause.Error()
	}
	return "parked " + p.reason
}

func park(reason, paymentIntent string) *parked {
	return &parked{reason: reason, paymentIntent: paymentIntent}
}

// apply runs the event's effects in a savepoint of tx, holding the lock of the event's payment
// (db.LockPayment) until tx ends: a refund or dispute and the top-up recording its payment are
// serialised, so either the refund sees the paid order, or its parking commits before the top-up looks
// for parked events. A parking effect rolls the savepoint back and yields a parked outcome; other
// errors are returned for the caller to roll everything back.
//
// A dedupe conflict parks safely here: Ledger.Post detects it with a SELECT after an insert that did
// nothing (ON CONFLICT DO NOTHING), so no statement failed and the transaction is still usable.
func (p *Processor) apply(ctx context.Context, tx db.Tx, ev event, f fetched) (outcome, error) {
	if p.otherMode(ev) {
		return outcome{status: OutcomeParked, reason: ReasonLivemodeMismatch, paymentIntent: ev.paymentIntent()}, nil
	}
	// Outside the savepoint: rolling a savepoint back releases the locks taken in it, and a parked
	// event must keep its payment locked until its parking commits.
	if paymentIntent := ev.paymentIntent(); paymentIntent != "" {
		if err := db.LockPayment(ctx, tx, paymentIntent); err != nil {
			return outcome{}, err
		}
	}
	var out outcome
	err := db.InTx(ctx, tx, func(sp db.Tx) error {
		var err error
		out, err = p.effects(ctx, sp, ev, f)
		return err
	})
	var pk *parked
	if errors.As(err, &pk) {
		if pk.cause != nil {
			p.Log.WarnContext(ctx, "stripe event parked", "event", ev.ID, "reason", pk.reason, "err", pk.cause)
		}
		return outcome{status: OutcomeParked, reason: pk.reason, paymentIntent: pk.paymentIntent}, nil
	}
	return out, err
}

// otherMode: ev is a test-mode event on a live deployment, or the reverse.
func (p *Processor) otherMode(ev event) bool {
	return p.Livemode != nil && ev.Livemode != *p.Livemode
}

func setOutcome(ctx context.Context, tx db.Tx, eventID string, out outcome) error {
	return db.SetEventOutcome(ctx, tx, eventID, out.status, out.reason, out.paymentIntent)
}

// endStep ends the span of an event's processing with its type and what was done (the outcome, the
// parking reason, or that it failed), never its ids or amounts, nor an error's text, which names them.
func endStep(span trace.Span, res Result, err error) {
	if span.IsRecording() {
		did := res.Outcome
		switch {
		case err != nil:
			did = "failed"
			span.SetStatus(codes.Error, "not applied")
		case res.Duplicate:
			did = "duplicate"
		}
		span.SetAttributes(attribute.String("stripe.event.type", res.Type), attribute.String("onceledger.outcome", did))
		if res.Parked != "" {
			span.SetAttributes(attribute.String("onceledger.parked_reason", res.Parked))
		}
	}
	span.End()
}

func (p *Processor) logOutcome(ctx context.Context, msg string, ev event, out outcome) {
	p.Log.InfoContext(ctx, msg, "event", ev.ID, "type", ev.Type, "api_version", ev.APIVersion,
		"outcome", out.status, "parked", out.reason, "payment_intent", out.paymentIntent,
		"posted", out.posted, "unparked", out.unparked, "deferred", out.deferred)
}
