package reconcile_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/reconcile"
	"github.com/onceledger/onceledger/internal/stripeevents"
	"github.com/onceledger/onceledger/internal/stripefake"
)

func eventJSON(id string, created time.Time) []byte {
	return fmt.Appendf(nil, `{"id":%q,"object":"event","type":"checkout.session.completed","api_version":"2024-06-20",
		"created":%d,"livemode":false,"pending_webhooks":1,
		"data":{"object":{"id":"cs_%s","object":"checkout.session","payment_status":"paid","amount_total":500}}}`,
		id, created.Unix(), id)
}

func TestRecoveryAppliesMissedEventsOnceAndSkipsProcessedOnes(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	now := time.Now()
	stripeAPI := stripefake.New()
	t.Cleanup(stripeAPI.Close)
	stripeAPI.SetEvents(eventJSON("evt_1", now), eventJSON("evt_2", now.Add(-time.Hour)), eventJSON("evt_3", now.Add(-2*time.Hour)))
	stripe := stripeevents.NewStripeClient(stripefake.SecretKey, stripeAPI.URL, nil)

	// The webhook's own processor: the sessions name no account, so each event is parked, once.
	events := &stripeevents.Processor{Pool: pool, Ledger: dbtest.Ledger(t, pool), Stripe: stripe, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	// The webhook already processed evt_2.
	if res, err := events.Process(ctx, eventJSON("evt_2", now)); err != nil || res.Duplicate {
		t.Fatalf("webhook delivery of evt_2: %+v %v", res, err)
	}

	reg := prometheus.NewRegistry()
	metrics := reconcile.NewMetrics(reg)
	r := reconcile.New(reconcile.Deps{
		Pool:    pool,
		Stripe:  stripe,
		Events:  events,
		Metrics: metrics,
	}, reconcile.Options{Lookback: 48 * time.Hour})

	rep, err := r.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Listed != 3 || rep.Applied != 2 || rep.Duplicates != 1 || rep.Failed != 0 {
		t.Fatalf("report %+v; want 3 listed, 2 applied, 1 duplicate", rep)
	}
	var stored int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM stripe_events WHERE event_id IN ('evt_1', 'evt_2', 'evt_3')`).Scan(&stored); err != nil || stored != 3 {
		t.Fatalf("stripe_events holds %d of the three events (%v)", stored, err)
	}
	if got := counterValue(t, reg, "onceledger_reconcile_recovered_events_total"); got != 2 {
		t.Fatalf("recovered events counter = %v, want 2", got)
	}

	// A second pass lists the same three: all duplicates now.
	again, err := r.Recover(ctx)
	if err != nil || again.Applied != 0 || again.Duplicates != 3 {
		t.Fatalf("second pass: %+v %v", again, err)
	}

	// One event per page: three pages per pass.
	queries := stripeAPI.EventQueries()
	first := queries[0]
	wantSince := time.Now().Add(-48 * time.Hour).Unix()
	if first.Get("delivery_success") != "false" || len(first["types[]"])+len(first["types[0]"]) == 0 ||
		first.Get("created[gte]") == "" || len(queries) != 6 {
		t.Fatalf("listing queries: %v", queries)
	}
	var since int64
	fmt.Sscan(first.Get("created[gte]"), &since)
	if since < wantSince-60 || since > wantSince+60 {
		t.Fatalf("created[gte]=%d, want about now-48h (%d)", since, wantSince)
	}
}

func TestRecoveryIsSkippedWithoutAStripeKey(t *testing.T) {
	t.Parallel()
	r := reconcile.New(reconcile.Deps{Stripe: stripeevents.NewStripeClient("", "", nil)}, reconcile.Options{})
	rep, err := r.Recover(context.Background())
	if err != nil || rep.Skipped == "" || rep.Listed != 0 {
		t.Fatalf("report %+v %v; want skipped", rep, err)
	}
}

// counterValue reads a counter from what reg exports, proving it was registered there.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("%s is not registered", name)
	return 0
}

// TestRecoveryCountsOnlyRequestedTypes: an event the listing returns outside the requested types is
// neither applied nor counted as recovered.
func TestRecoveryCountsOnlyRequestedTypes(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	stripeAPI := stripefake.New()
	t.Cleanup(stripeAPI.Close)
	other := bytes.Replace(eventJSON("evt_other", time.Now()), []byte("checkout.session.completed"), []byte("customer.created"), 1)
	stripeAPI.SetEvents(eventJSON("evt_handled", time.Now()), other)
	stripe := stripeevents.NewStripeClient(stripefake.SecretKey, stripeAPI.URL, nil)
	reg := prometheus.NewRegistry()
	r := reconcile.New(reconcile.Deps{
		Pool:    pool,
		Stripe:  stripe,
		Events:  &stripeevents.Processor{Pool: pool, Ledger: dbtest.Ledger(t, pool), Stripe: stripe, Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		Metrics: reconcile.NewMetrics(reg),
	}, reconcile.Options{})

	rep, err := r.Recover(ctx)
	if err != nil || rep.Listed != 2 || rep.Applied != 1 || rep.Unrequested != 1 {
		t.Fatalf("report %+v %v; want 2 listed, 1 applied, 1 unrequested", rep, err)
	}
	if got := counterValue(t, reg, "onceledger_reconcile_recovered_events_total"); got != 1 {
		t.Fatalf("recovered events counter = %v, want 1", got)
	}
	var stored int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM stripe_events`).Scan(&stored); err != nil || stored != 1 {
		t.Fatalf("stripe_events holds %d events (%v), want only the handled one", stored, err)
	}
}
