package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/config"
	"github.com/onceledger/onceledger/db"
)

// The webhook-group family is an experiment, run only when named (-only webhook-group): the best case
// of group commit across webhook deliveries measured against the happy path's
// own transaction (db.ReadCheckoutState, then db.Ledger.PayCheckout). Every delivery is a first one
// for a new session, so nothing ever falls back: a real grouping would add coordination and fallbacks
// to this, and the HTTP, signature and JSON work of each delivery, which no grouping shares.
const webhookGroupFamily = "webhook-group"

func (b *bench) webhookGroups(ctx context.Context, d time.Duration, accounts int) {
	// Every row runs on a pool of the server's size: on the bench's own 64 connections, one transaction
	// per delivery loses to the server itself, its commits queued behind 32 or 64 backends on two cores.
	cfg, err := pgxpool.ParseConfig(b.databaseURL)
	if err != nil {
		b.rows = append(b.rows, row{result: result{workload: webhookGroupFamily, errors: 1, firstErr: err.Error()}})
		return
	}
	cfg.MaxConns = serverPoolSize(b.env)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.rows = append(b.rows, row{result: result{workload: webhookGroupFamily, errors: 1, firstErr: err.Error()}})
		return
	}
	defer pool.Close()
	// Unmeasured: the first workload after the seed would otherwise also pay for cold caches.
	measure(ctx, "warm-up", 32, d/3, func(ctx context.Context, i int) ([]time.Duration, error) {
		return timed(func() error { return payCheckoutDirect(ctx, pool, newTopupEvent("gwarm", i, accounts)) })
	})
	for _, c := range []int{32, 64} {
		run := fmt.Sprintf("c%d", c)
		oneTx := measure(ctx, fmt.Sprintf("webhook cold, PayCheckout 1 tx/delivery, direct, %d conns", cfg.MaxConns), c, d,
			func(ctx context.Context, i int) ([]time.Duration, error) {
				return timed(func() error { return payCheckoutDirect(ctx, pool, newTopupEvent("gtx"+run, i, accounts)) })
			})
		b.add(oneTx, nil)
		for _, v := range []struct {
			name     string
			inFlight int
			setBased bool
		}{
			{"webhook cold, ideal group commit, direct", 1, false},
			{"webhook cold, ideal group commit, 2 in flight, direct", 2, false},
			{"webhook cold, ideal group commit set-based, direct", 1, true},
			{"webhook cold, ideal group commit set-based, 2 in flight, direct", 2, true},
		} {
			g := &checkoutGrouper{pool: pool, max: c, inFlight: v.inFlight, setBased: v.setBased}
			prefix := fmt.Sprintf("g%s%d%t", run, v.inFlight, v.setBased)
			grouped := measure(ctx, v.name, c, d, func(ctx context.Context, i int) ([]time.Duration, error) {
				return timed(func() error { return g.deliver(ctx, newTopupEvent(prefix, i, accounts)) })
			})
			b.rows = append(b.rows, row{result: grouped, baseline: &oneTx, note: g.meanGroup()})
		}
		served := measure(ctx, "webhook cold (server, happy path)", c, d, func(ctx context.Context, i int) ([]time.Duration, error) {
			return timed(func() error { return b.http.deliver(ctx, newTopupEvent("gh"+run, i, accounts)) })
		})
		b.rows = append(b.rows, row{result: served, baseline: &oneTx, note: "the same deliveries through HTTP, signature and JSON"})
	}
}

// serverPoolSize is the server's pool size: DB_MAX_CONNS when the bench passes it on, else the default.
func serverPoolSize(env []string) int32 {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "DB_MAX_CONNS="); ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				return int32(n)
			}
		}
	}
	return config.DefaultDBMaxConns
}

// checkoutFor is the payment the webhook's happy path makes of e, given the state it read.
func checkoutFor(e topupEvent, state db.CheckoutState) (db.CheckoutPayment, error) {
	if state.Recorded || state.Order != nil || state.Account == nil || state.ParkedWaiting {
		return db.CheckoutPayment{}, fmt.Errorf("event %s: not a first delivery of a new session: %+v", e.id, state)
	}
	return db.CheckoutPayment{
		Event: db.Event{
			ID: e.id, Type: "checkout.session.completed", APIVersion: "2024-06-20", Created: time.Now(),
			Payload: e.payload, Outcome: "applied", PaymentIntent: e.paymentIntent,
		},
		Order: db.Topup{
			ID: e.session, AccountID: state.Account.ID, SessionID: e.session, PaymentIntent: e.paymentIntent,
			Amount: topupAmount, Currency: state.Account.Currency,
		},
		Credit: db.Posting{Kind: db.KindTopup, Description: "Stripe Checkout " + e.session, DedupeKey: "stripe:" + e.id},
	}, nil
}

func readCheckout(ctx context.Context, pool *pgxpool.Pool, e topupEvent) (db.CheckoutPayment, error) {
	state, err := db.ReadCheckoutState(ctx, pool, e.id, e.session, e.account, e.paymentIntent)
	if err != nil {
		return db.CheckoutPayment{}, err
	}
	return checkoutFor(e, state)
}

// payCheckoutDirect is the webhook's happy path, as the database sees it, for one delivery: the read, then PayCheckout's
// transaction.
func payCheckoutDirect(ctx context.Context, pool *pgxpool.Pool, e topupEvent) error {
	p, err := readCheckout(ctx, pool, e)
	if err != nil {
		return err
	}
	paid, _, err := db.Ledger{}.PayCheckout(ctx, pool, p)
	if err == nil && paid != db.CheckoutCredited {
		err = fmt.Errorf("event %s: PayCheckout = %d, want credited", e.id, paid)
	}
	return err
}

// checkoutGrouper gathers the deliveries waiting when a group committed (up to max) and commits them
// in one transaction, with up to inFlight groups committing at once: one keeps a single backend
// busy, two let the database use both cores. Each delivery reads its state alone first, as the webhook
// does. No window: the callers a group answered come back while the next one commits.
type checkoutGrouper struct {
	pool     *pgxpool.Pool
	max      int
	inFlight int
	setBased bool

	mu      sync.Mutex
	waiting []*groupedCheckout
	running int // groups committing or about to
	groups  int
	members int
}

type groupedCheckout struct {
	p    db.CheckoutPayment
	done chan error
}

func (g *checkoutGrouper) deliver(ctx context.Context, e topupEvent) error {
	p, err := readCheckout(ctx, g.pool, e)
	if err != nil {
		return err
	}
	m := &groupedCheckout{p: p, done: make(chan error, 1)}
	g.mu.Lock()
	g.waiting = append(g.waiting, m)
	if g.running < g.inFlight {
		g.running++
		go g.drain(context.WithoutCancel(ctx))
	}
	g.mu.Unlock()
	return <-m.done
}

func (g *checkoutGrouper) drain(ctx context.Context) {
	for {
		g.mu.Lock()
		if len(g.waiting) == 0 {
			g.running--
			g.mu.Unlock()
			return
		}
		n := min(len(g.waiting), g.max)
		group := g.waiting[:n:n]
		g.waiting = slices.Clone(g.waiting[n:])
		g.groups++
		g.members += n
		g.mu.Unlock()
		commit := commitCheckoutGroup
		if g.setBased {
			commit = commitCheckoutGroupSetBased
		}
		err := commit(ctx, g.pool, group)
		for _, m := range group {
			m.done <- err
		}
	}
}

func (g *checkoutGrouper) meanGroup() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.groups == 0 {
		return ""
	}
	return fmt.Sprintf("%.1f deliveries per transaction on average", float64(g.members)/float64(g.groups))
}

// The statements of PayCheckout's transaction (sql/queries: StripeEventsInsert, StripeEventsLockPayment,
// TopupsPaySession, LedgerInsert), copied so that the experiment stays out of db/.
const (
	sqlEventInsert = `INSERT INTO stripe_events (event_id, type, api_version, livemode, created, payload, outcome, parked_reason, payment_intent)
VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, $8)
ON CONFLICT (event_id) DO NOTHING
RETURNING seq`
	sqlLockPayment = `SELECT pg_advisory_xact_lock(hashtextextended($1::text, 0))`
	sqlPaySession  = `WITH paid_pending AS (
    UPDATE topups t
    SET status = 'paid', payment_intent = $1::text, paid_event_id = $2::text, paid_at = now()
    WHERE t.session_id = $3::text AND t.status = 'pending' AND t.amount = $4::bigint AND lower(t.currency) = lower($5::text)
    RETURNING t.id, t.account_id
), recorded_paid AS (
    INSERT INTO topups (id, account_id, session_id, amount, currency, status, payment_intent, paid_event_id, paid_at)
    SELECT $6::text, $7::text, $3::text, $4::bigint, $5::text, 'paid', $1::text, $2::text, now()
    WHERE NOT EXISTS (SELECT 1 FROM topups WHERE session_id = $3::text)
    ON CONFLICT (session_id) DO NOTHING
    RETURNING id, account_id
), paid AS (
    SELECT * FROM paid_pending UNION ALL SELECT * FROM recorded_paid
)
SELECT paid.account_id,
       EXISTS (SELECT 1 FROM stripe_events e WHERE e.outcome = 'parked' AND e.parked_reason = 'unknown_payment'
                 AND e.payment_intent = $1::text) AS parked_waiting
FROM paid`
	sqlLedgerInsert = `INSERT INTO ledger (account_id, kind, amount, description, dedupe_key, payment_intent, seq, balance_after)
SELECT a.id, $2, $3::bigint, $4, $5, $6, a.last_seq + 1, a.balance + $3::bigint
FROM accounts a
WHERE a.id = $1
FOR NO KEY UPDATE
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id`
)

// commitCheckoutGroup commits group in one transaction: one batch with BEGIN and each member's four
// statements, in payment-intent order so that two groups could never deadlock on the payments' locks,
// then, once every statement did what the happy path expects, COMMIT. Any surprise fails the group.
func commitCheckoutGroup(ctx context.Context, pool *pgxpool.Pool, group []*groupedCheckout) error {
	group = slices.SortedFunc(slices.Values(group), func(a, b *groupedCheckout) int {
		return cmp.Compare(a.p.Order.PaymentIntent, b.p.Order.PaymentIntent)
	})
	batch := &pgx.Batch{}
	batch.BeginTx(pgx.TxOptions{})
	for _, m := range group {
		e, o, c := m.p.Event, m.p.Order, m.p.Credit
		batch.Queue(sqlEventInsert, e.ID, e.Type, e.APIVersion, e.Livemode, e.Created, e.Payload, e.Outcome, e.PaymentIntent)
		batch.Queue(sqlLockPayment, o.PaymentIntent)
		batch.Queue(sqlPaySession, o.PaymentIntent, e.ID, o.SessionID, o.Amount, o.Currency, o.ID, o.AccountID)
		batch.Queue(sqlLedgerInsert, o.AccountID, c.Kind, o.Amount, c.Description, c.DedupeKey, o.PaymentIntent)
	}
	results := pool.SendBatch(ctx, batch)
	tx := results.Tx()
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := results.Exec(); err != nil {
		_ = results.Close()
		return fmt.Errorf("begin: %w", err)
	}
	for _, m := range group {
		var (
			seq, entry    int64
			account       string
			parkedWaiting bool
		)
		if err := results.QueryRow().Scan(&seq); err != nil {
			_ = results.Close()
			return fmt.Errorf("event %s: %w", m.p.Event.ID, err)
		}
		if _, err := results.Exec(); err != nil {
			_ = results.Close()
			return fmt.Errorf("lock %s: %w", m.p.Order.PaymentIntent, err)
		}
		if err := results.QueryRow().Scan(&account, &parkedWaiting); err != nil || parkedWaiting || account != m.p.Order.AccountID {
			_ = results.Close()
			return fmt.Errorf("pay session %s: %v (parked waiting %t, account %q)", m.p.Order.SessionID, err, parkedWaiting, account)
		}
		if err := results.QueryRow().Scan(&entry); err != nil {
			_ = results.Close()
			return fmt.Errorf("credit %s: %w", m.p.Credit.DedupeKey, err)
		}
	}
	if err := results.Close(); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// The set-based variant: the same four steps as one statement each for the whole group, the arrays
// read in lockstep (one element per member, in payment-intent order).
const (
	sqlEventInsertGroup = `INSERT INTO stripe_events (event_id, type, api_version, livemode, created, payload, outcome, payment_intent)
SELECT e.event_id, $2::text, $3::text, false, $4::timestamptz, e.payload::jsonb, 'applied', e.payment_intent
FROM unnest($1::text[], $5::text[], $6::text[]) AS e (event_id, payload, payment_intent)
ON CONFLICT (event_id) DO NOTHING
RETURNING seq`
	sqlLockPaymentGroup = `SELECT count(pg_advisory_xact_lock(hashtextextended(pi, 0)))
FROM (SELECT pi FROM unnest($1::text[]) AS pi ORDER BY pi) AS ordered`
	sqlPaySessionGroup = `WITH recorded_paid AS (
    INSERT INTO topups (id, account_id, session_id, amount, currency, status, payment_intent, paid_event_id, paid_at)
    SELECT s.session_id, s.account_id, s.session_id, $4::bigint, $5::text, 'paid', s.payment_intent, s.event_id, now()
    FROM unnest($1::text[], $2::text[], $3::text[], $6::text[]) AS s (session_id, account_id, payment_intent, event_id)
    WHERE NOT EXISTS (SELECT 1 FROM topups t WHERE t.session_id = s.session_id)
    ON CONFLICT (session_id) DO NOTHING
    RETURNING account_id, payment_intent
)
SELECT count(*),
       count(*) FILTER (WHERE EXISTS (SELECT 1 FROM stripe_events e WHERE e.outcome = 'parked'
                 AND e.parked_reason = 'unknown_payment' AND e.payment_intent = p.payment_intent))
FROM recorded_paid p`
	sqlLedgerInsertGroup = `INSERT INTO ledger (account_id, kind, amount, description, dedupe_key, payment_intent, seq, balance_after)
SELECT a.id, $6::text, $3::bigint, e.description, e.dedupe_key, e.payment_intent, a.last_seq + 1, a.balance + $3::bigint
FROM unnest($1::text[], $2::text[], $4::text[], $5::text[]) AS e (account_id, description, dedupe_key, payment_intent)
JOIN accounts a ON a.id = e.account_id
ORDER BY a.id
FOR NO KEY UPDATE OF a
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id`
)

// commitCheckoutGroupSetBased is commitCheckoutGroup with one statement per step for the whole group.
// The bench's members share a type, API version, amount and currency, which the statements take once.
// Only the path the bench exercises (a session with no order yet, distinct accounts within a group) is
// written; anything else fails the group.
func commitCheckoutGroupSetBased(ctx context.Context, pool *pgxpool.Pool, group []*groupedCheckout) error {
	group = slices.SortedFunc(slices.Values(group), func(a, b *groupedCheckout) int {
		return cmp.Compare(a.p.Order.PaymentIntent, b.p.Order.PaymentIntent)
	})
	n := len(group)
	var (
		events, payloads, intents, sessions, accounts, descriptions, keys = make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	)
	first := group[0].p
	for k, m := range group {
		e, o, c := m.p.Event, m.p.Order, m.p.Credit
		if e.Type != first.Event.Type || o.Amount != first.Order.Amount || !strings.EqualFold(o.Currency, first.Order.Currency) {
			return fmt.Errorf("event %s: the set-based experiment takes one type, amount and currency per group", e.ID)
		}
		events[k], payloads[k], intents[k] = e.ID, string(e.Payload), o.PaymentIntent
		sessions[k], accounts[k], descriptions[k], keys[k] = o.SessionID, o.AccountID, c.Description, c.DedupeKey
	}
	batch := &pgx.Batch{}
	batch.BeginTx(pgx.TxOptions{})
	batch.Queue(sqlEventInsertGroup, events, first.Event.Type, first.Event.APIVersion, first.Event.Created, payloads, intents)
	batch.Queue(sqlLockPaymentGroup, intents)
	batch.Queue(sqlPaySessionGroup, sessions, accounts, intents, first.Order.Amount, first.Order.Currency, events)
	batch.Queue(sqlLedgerInsertGroup, accounts, descriptions, first.Order.Amount, keys, intents, first.Credit.Kind)
	results := pool.SendBatch(ctx, batch)
	tx := results.Tx()
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	fail := func(step string, err error) error {
		_ = results.Close()
		return fmt.Errorf("%s: %w", step, err)
	}
	if _, err := results.Exec(); err != nil {
		return fail("begin", err)
	}
	tag, err := results.Exec()
	if err != nil || tag.RowsAffected() != int64(n) {
		return fail("events", fmt.Errorf("%d of %d recorded: %v", tag.RowsAffected(), n, err))
	}
	if _, err := results.Exec(); err != nil {
		return fail("locks", err)
	}
	var paid, parked int
	if err := results.QueryRow().Scan(&paid, &parked); err != nil || paid != n || parked != 0 {
		return fail("orders", fmt.Errorf("%d of %d paid, %d parked waiting: %v", paid, n, parked, err))
	}
	tag, err = results.Exec()
	if err != nil || tag.RowsAffected() != int64(n) {
		return fail("credits", fmt.Errorf("%d of %d posted: %v", tag.RowsAffected(), n, err))
	}
	if err := results.Close(); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
