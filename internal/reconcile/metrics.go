package reconcile

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceledger/onceledger/db"
)

// Metrics are the reconciler's Prometheus counters.
type Metrics struct {
	// BilledDecisions counts usage entries the reconciler inserted (one per decision, ever).
	BilledDecisions prometheus.Counter
	// RecoveredEvents counts missed Stripe events a recovery pass applied (not the duplicates).
	RecoveredEvents prometheus.Counter
	// LastBilled is when the last billing pass that succeeded started (Unix seconds): everything
	// reported before it is billed, so time() minus it is how far billing lags.
	LastBilled prometheus.Gauge
	// Waiting is the number of decisions the last pass left unbilled because their account does not
	// exist yet.
	Waiting prometheus.Gauge
	// OutOfRange is the number of decisions the last pass could not bill because their account's
	// balance would leave a bigint.
	OutOfRange prometheus.Gauge
	// CapturedHolds counts holds captured by billing their decisions; CostsAboveHold those whose
	// decision cost more than the hold. ExpiredHolds counts holds the expiry pass expired.
	CapturedHolds  prometheus.Counter
	CostsAboveHold prometheus.Counter
	ExpiredHolds   prometheus.Counter
	// SpendOverLimit counts what billed decisions took past hard spend limits' caps (minor units): the
	// work was done and billed in full; a product that wants none authorises first.
	SpendOverLimit prometheus.Counter
	// StripeDrift is the open drift between Stripe and the ledger by reason (stripe_drift), as the last
	// drift pass left it.
	StripeDrift *prometheus.GaugeVec
}

// NewMetrics creates the counters and registers them on reg; with a nil reg they count without being
// exported (commands that serve no /metrics). Registering twice on one registry panics, as Prometheus
// does for any duplicate collector.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		BilledDecisions: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "onceledger", Subsystem: "reconcile", Name: "billed_decisions_total",
			Help: "Decisions billed as usage entries (each decision is billed at most once).",
		}),
		RecoveredEvents: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "onceledger", Subsystem: "reconcile", Name: "recovered_events_total",
			Help: "Missed Stripe events listed by the API and applied by a recovery pass.",
		}),
		LastBilled: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "onceledger", Subsystem: "reconcile", Name: "last_billed_timestamp_seconds",
			Help: "Start of the last successful billing pass; decisions reported before it are billed.",
		}),
		Waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "onceledger", Subsystem: "reconcile", Name: "waiting_decisions",
			Help: "Decisions the last pass could not bill yet because their account does not exist.",
		}),
		OutOfRange: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "onceledger", Subsystem: "reconcile", Name: "out_of_range_decisions",
			Help: "Decisions the last pass could not bill because their account's balance would leave a bigint.",
		}),
		CapturedHolds: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "onceledger", Subsystem: "reconcile", Name: "captured_holds_total",
			Help: "Holds captured by billing the decision that names them.",
		}),
		CostsAboveHold: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "onceledger", Subsystem: "reconcile", Name: "costs_above_hold_total",
			Help: "Decisions that cost more than the hold they name: the hold is captured whole and the cost billed in full.",
		}),
		ExpiredHolds: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "onceledger", Subsystem: "reconcile", Name: "expired_holds_total",
			Help: "Holds the expiry pass moved from held to expired, releasing their reservations.",
		}),
		SpendOverLimit: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "onceledger", Name: "spend_over_limit_total",
			Help: "Minor units billed decisions took past hard spend limits (billed in full, counted in the windows' over).",
		}),
		StripeDrift: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "onceledger", Name: "stripe_drift",
			Help: "Open differences between Stripe and the ledger, by reason, as the last drift pass left them.",
		}, []string{"reason"}),
	}
	for _, reason := range db.DriftReasons {
		m.StripeDrift.WithLabelValues(reason) // every reason exported, at 0 until a pass counts
	}
	if reg != nil {
		reg.MustRegister(m.BilledDecisions, m.RecoveredEvents, m.LastBilled, m.Waiting, m.OutOfRange, m.CapturedHolds, m.CostsAboveHold, m.ExpiredHolds,
			m.SpendOverLimit, m.StripeDrift)
	}
	return m
}
