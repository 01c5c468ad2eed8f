package stripeevents

import (
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/client"

	"github.com/onceledger/onceledger/internal/tracing"
)

// NewStripeClient returns the Stripe API client for secretKey, talking to apiBase when it is set
// (tests, stripe-mock), or nil when no key is configured. The binary builds one and hands it to
// everything that calls Stripe: the processor (refund lists), the API (Checkout Sessions) and the
// reconciler (missed events). Calls time out after 10 s and are not retried inside the client: the
// caller's own retry (Stripe redelivering a webhook, the next reconcile pass) is the retry. With
// tracing on, every call is a span (tracing.Tracing.Stripe).
func NewStripeClient(secretKey, apiBase string, tr *tracing.Tracing) *client.API {
	if secretKey == "" {
		return nil
	}
	backendCfg := &stripe.BackendConfig{
		HTTPClient:        &http.Client{Timeout: 10 * time.Second, Transport: tr.Stripe(nil)},
		MaxNetworkRetries: stripe.Int64(0),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelError},
	}
	if apiBase != "" {
		backendCfg.URL = stripe.String(apiBase)
	}
	return client.New(secretKey, stripe.NewBackendsWithConfig(backendCfg))
}
