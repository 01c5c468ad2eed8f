// Package metrics holds every Prometheus metric the service exports at /metrics, on a registry of its
// own (never the global default), so that tests can build one per server and assert on it.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is the service's metric set.
type Metrics struct {
	Registry *prometheus.Registry

	// WebhookDeliveries counts Stripe webhook deliveries by event type and outcome: credited, applied,
	// recorded, ignored, duplicate, parked, rejected (bad signature or body) or failed (transient, 503).
	// reason is the parking or rejection reason, empty otherwise.
	WebhookDeliveries *prometheus.CounterVec
	// Postings counts posting attempts by entry kind and result: posted, replay or conflict.
	Postings *prometheus.CounterVec
	// HTTPDuration is request latency by route template, method and status.
	HTTPDuration *prometheus.HistogramVec
}

// New builds the metric set with the Go runtime and process collectors.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		WebhookDeliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onceledger_webhook_deliveries_total",
			Help: "Stripe webhook deliveries by event type, outcome and reason.",
		}, []string{"type", "outcome", "reason"}),
		Postings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onceledger_postings_total",
			Help: "Ledger posting attempts by entry kind and result (posted, replay, conflict).",
		}, []string{"kind", "result"}),
		HTTPDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "onceledger_http_request_duration_seconds",
			Help:    "HTTP request latency by route, method and status.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"route", "method", "status"}),
	}
	m.Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.WebhookDeliveries, m.Postings, m.HTTPDuration,
	)
	return m
}

// ObservePosting counts one posting attempt; it fits db.Ledger's Observe hook.
func (m *Metrics) ObservePosting(kind, result string) {
	m.Postings.WithLabelValues(kind, result).Inc()
}

// WatchPool exports the pool's connection statistics.
func (m *Metrics) WatchPool(pool *pgxpool.Pool) {
	m.Registry.MustRegister(poolCollector{pool: pool})
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// Timed times every request of one route by route, its pattern (not its path, which would explode
// the label set with ids), method and status.
func (m *Metrics) Timed(route string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		m.HTTPDuration.WithLabelValues(route, methodLabel(r.Method), strconv.Itoa(rec.status)).Observe(time.Since(start).Seconds())
	})
}

// methodLabel is the request method as a label: the standard ones by name, anything else "OTHER", so
// that a client inventing methods can never grow /metrics, whatever methods a timed route takes.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return method
	}
	return "OTHER"
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// poolCollector reads pgxpool's statistics at scrape time.
type poolCollector struct{ pool *pgxpool.Pool }

var (
	poolTotal    = prometheus.NewDesc("onceledger_db_pool_connections", "Connections in the pool by state.", []string{"state"}, nil)
	poolMax      = prometheus.NewDesc("onceledger_db_pool_max_connections", "The pool's connection limit.", nil, nil)
	poolAcquires = prometheus.NewDesc("onceledger_db_pool_acquires_total", "Connections acquired from the pool.", nil, nil)
	poolWaits    = prometheus.NewDesc("onceledger_db_pool_empty_acquires_total", "Acquires that had to wait for a connection.", nil, nil)
)

func (poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolTotal
	ch <- poolMax
	ch <- poolAcquires
	ch <- poolWaits
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	ch <- prometheus.MustNewConstMetric(poolTotal, prometheus.GaugeValue, float64(s.AcquiredConns()), "acquired")
	ch <- prometheus.MustNewConstMetric(poolTotal, prometheus.GaugeValue, float64(s.IdleConns()), "idle")
	ch <- prometheus.MustNewConstMetric(poolTotal, prometheus.GaugeValue, float64(s.ConstructingConns()), "constructing")
	ch <- prometheus.MustNewConstMetric(poolMax, prometheus.GaugeValue, float64(s.MaxConns()))
	ch <- prometheus.MustNewConstMetric(poolAcquires, prometheus.CounterValue, float64(s.AcquireCount()))
	ch <- prometheus.MustNewConstMetric(poolWaits, prometheus.CounterValue, float64(s.EmptyAcquireCount()))
}
