package reconcile

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the reconciler's Prometheus counters.
type Metrics struct {
	// BilledDecisions counts usage entries the reconciler inserted (one per decision, ever).
	BilledDecisions prometheus.Counter
	// RecoveredEvents counts missed Stripe events a recovery pass applied (not the duplicates).
	RecoveredEvents prometheus.Counter
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
	}
	if reg != nil {
		reg.MustRegister(m.BilledDecisions, m.RecoveredEvents)
	}
	return m
}
