// Package stripeapi builds the one Stripe API client the service uses (refund lists for the webhook,
// Checkout Sessions for the API, missed events for the reconciler), from the configuration.
package stripeapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/client"

	"github.com/onceledger/onceledger/config"
)

// ErrNotConfigured: STRIPE_SECRET_KEY is unset, so Stripe cannot be called.
var ErrNotConfigured = errors.New("stripe API not configured: set STRIPE_SECRET_KEY")

// New returns a client for cfg's key, talking to STRIPE_API_BASE when set (tests, stripe-mock), or
// nil when no key is configured. Calls time out after 10 s and are not retried inside the client:
// the caller's own retry (Stripe redelivering a webhook, the next reconcile pass) is the retry.
func New(cfg config.Config) *client.API {
	if cfg.StripeSecretKey == "" {
		return nil
	}
	backendCfg := &stripe.BackendConfig{
		HTTPClient:        &http.Client{Timeout: 10 * time.Second},
		MaxNetworkRetries: stripe.Int64(0),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelError},
	}
	if cfg.StripeAPIBase != "" {
		backendCfg.URL = stripe.String(cfg.StripeAPIBase)
	}
	return client.New(cfg.StripeSecretKey, stripe.NewBackendsWithConfig(backendCfg))
}
