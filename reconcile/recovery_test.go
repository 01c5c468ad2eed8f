package reconcile_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stripe/stripe-go/v79"

	"github.com/onceledger/onceledger/config"
	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbsqlc"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/reconcile"
	"github.com/onceledger/onceledger/stripeapi"
)

// recordingProcessor stands in for the webhook's code path at the database level: it records the
// event in stripe_events in its own transaction, where the primary key makes a second delivery a
// duplicate, exactly as the webhook does before applying any effect.
type recordingProcessor struct{ pool *pgxpool.Pool }

func (p recordingProcessor) Process(ctx context.Context, raw []byte) (duplicate bool, err error) {
	var event stripe.Event
	if err := json.Unmarshal(raw, &event); err != nil {
		return false, err
	}
	err = db.InTx(ctx, p.pool, func(tx pgx.Tx) error {
		_, err := dbsqlc.New(tx).StripeEventInsert(ctx, dbsqlc.StripeEventInsertParams{
			EventID: event.ID, Type: string(event.Type), ApiVersion: event.APIVersion, Livemode: event.Livemode,
			Created: time.Unix(event.Created, 0), Payload: raw, Outcome: "applied",
		})
		if errors.Is(err, pgx.ErrNoRows) {
			duplicate = true
			return nil
		}
		return err
	})
	return duplicate, err
}

func eventJSON(id string, created time.Time) string {
	return fmt.Sprintf(`{"id":%q,"object":"event","type":"checkout.session.completed","api_version":"2024-06-20",
		"created":%d,"livemode":false,"pending_webhooks":1,
		"data":{"object":{"id":"cs_%s","object":"checkout.session","payment_status":"paid","amount_total":500}}}`,
		id, created.Unix(), id)
}

// fakeStripe lists evt_1 and evt_2 on a first page and evt_3 on a second, and records the queries
// it was asked.
type fakeStripe struct {
	mu      sync.Mutex
	queries []url.Values
}

func (f *fakeStripe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || r.URL.Path != "/v1/events" {
		http.Error(w, `{"error":{"message":"unexpected call"}}`, http.StatusNotFound)
		return
	}
	f.mu.Lock()
	f.queries = append(f.queries, r.URL.Query())
	f.mu.Unlock()
	now := time.Now()
	page := fmt.Sprintf(`{"object":"list","url":"/v1/events","has_more":true,"data":[%s,%s]}`,
		eventJSON("evt_1", now), eventJSON("evt_2", now.Add(-time.Hour)))
	if r.URL.Query().Get("starting_after") == "evt_2" {
		page = fmt.Sprintf(`{"object":"list","url":"/v1/events","has_more":false,"data":[%s]}`,
			eventJSON("evt_3", now.Add(-2*time.Hour)))
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, page)
}

func TestRecoveryAppliesMissedEventsOnceAndSkipsProcessedOnes(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	stripeServer := &fakeStripe{}
	srv := httptest.NewServer(stripeServer)
	t.Cleanup(srv.Close)

	events := recordingProcessor{pool: pool}
	// The webhook already processed evt_2.
	if dup, err := events.Process(ctx, []byte(eventJSON("evt_2", time.Now()))); err != nil || dup {
		t.Fatalf("webhook delivery of evt_2: duplicate=%v %v", dup, err)
	}

	reg := prometheus.NewRegistry()
	metrics := reconcile.NewMetrics(reg)
	r := reconcile.New(reconcile.Deps{
		Pool:    pool,
		Stripe:  stripeapi.New(config.Config{StripeSecretKey: "sk_test_reconcile", StripeAPIBase: srv.URL}),
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

	stripeServer.mu.Lock()
	defer stripeServer.mu.Unlock()
	first := stripeServer.queries[0]
	wantSince := time.Now().Add(-48 * time.Hour).Unix()
	if first.Get("delivery_success") != "false" || len(first["types[]"])+len(first["types[0]"]) == 0 ||
		first.Get("created[gte]") == "" || len(stripeServer.queries) != 4 {
		t.Fatalf("listing queries: %v", stripeServer.queries)
	}
	var since int64
	fmt.Sscan(first.Get("created[gte]"), &since)
	if since < wantSince-60 || since > wantSince+60 {
		t.Fatalf("created[gte]=%d, want about now-48h (%d)", since, wantSince)
	}
}

func TestRecoveryIsSkippedWithoutAStripeKey(t *testing.T) {
	t.Parallel()
	r := reconcile.New(reconcile.Deps{Stripe: stripeapi.New(config.Config{})}, reconcile.Options{})
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
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		other := strings.Replace(eventJSON("evt_other", time.Now()), "checkout.session.completed", "customer.created", 1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"list","url":"/v1/events","has_more":false,"data":[%s,%s]}`, eventJSON("evt_handled", time.Now()), other)
	}))
	t.Cleanup(srv.Close)
	reg := prometheus.NewRegistry()
	r := reconcile.New(reconcile.Deps{
		Pool:    pool,
		Stripe:  stripeapi.New(config.Config{StripeSecretKey: "sk_test_reconcile", StripeAPIBase: srv.URL}),
		Events:  recordingProcessor{pool: pool},
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
