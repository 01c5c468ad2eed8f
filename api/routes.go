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

	return r
}
