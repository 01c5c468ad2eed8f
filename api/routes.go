package api

import (
	"net/http"

	"github.com/gorilla/mux"
)

// routes is the one place that lists every route.
func routes(d Deps) http.Handler {
	r := mux.NewRouter()
	r.NotFoundHandler = handleNotFound()
	r.MethodNotAllowedHandler = handleMethodNotAllowed()
	r.Use(d.Metrics.Middleware)

	r.Handle("/healthz", handleHealthz()).Methods(http.MethodGet)
	r.Handle("/readyz", handleReadyz(d)).Methods(http.MethodGet)
	r.Handle("/metrics", d.Metrics.Handler()).Methods(http.MethodGet)
	r.Handle("/webhooks/stripe", handleStripeWebhook(d)).Methods(http.MethodPost)
	r.Handle("/openapi.yaml", handleOpenAPI()).Methods(http.MethodGet)
	r.PathPrefix("/console").Handler(handleConsole(d))

	v1 := r.PathPrefix("/v1").Subrouter()
	v1.Use(requireAPIKey(d.Config.APIKeys))
	v1.Handle("/accounts/{id}", handlePutAccount(d)).Methods(http.MethodPut)
	v1.Handle("/accounts/{id}", handleGetAccount(d)).Methods(http.MethodGet)
	v1.Handle("/accounts/{id}/entries", handleListEntries(d)).Methods(http.MethodGet)
	v1.Handle("/accounts/{id}/balance", handleGetBalanceAt(d)).Methods(http.MethodGet)
	v1.Handle("/accounts/{id}/statement", handleGetStatement(d)).Methods(http.MethodGet)
	v1.Handle("/accounts/{id}/adjustments", handlePostAdjustment(d)).Methods(http.MethodPost)
	v1.Handle("/accounts/{id}/topups", handlePostTopup(d)).Methods(http.MethodPost)
	v1.Handle("/accounts/{id}/recharge", handlePutRecharge(d)).Methods(http.MethodPut)
	v1.Handle("/accounts/{id}/alerts", handlePutAlerts(d)).Methods(http.MethodPut)
	v1.Handle("/accounts/{id}/holds", handlePostHold(d)).Methods(http.MethodPost)
	v1.Handle("/accounts/{id}/holds/{hold_id}", handleGetHold(d)).Methods(http.MethodGet)
	v1.Handle("/accounts/{id}/holds/{hold_id}/capture", handleCaptureHold(d)).Methods(http.MethodPost)
	v1.Handle("/accounts/{id}/holds/{hold_id}/void", handleVoidHold(d)).Methods(http.MethodPost)
	v1.Handle("/accounts/{id}/lots", handleListLots(d)).Methods(http.MethodGet)
	v1.Handle("/lots/{id}/void", handleVoidLot(d)).Methods(http.MethodPost)
	v1.Handle("/topups/{id}", handleGetTopup(d)).Methods(http.MethodGet)
	v1.Handle("/decisions", handlePostDecisions(d)).Methods(http.MethodPost)
	v1.Handle("/stripe/events", handleListStripeEvents(d)).Methods(http.MethodGet)

	return r
}
