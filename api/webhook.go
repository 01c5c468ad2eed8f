package api

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/onceledger/onceledger/internal/stripeevents"
)

// maxWebhookBody is the largest Stripe event accepted; Stripe's are far smaller.
const maxWebhookBody = 1 << 20

// webhookResponse is the body of every answered delivery (SPEC §4).
type webhookResponse struct {
	OK        bool   `json:"ok"`
	Event     string `json:"event"`
	Duplicate bool   `json:"duplicate"`
	Credited  bool   `json:"credited"`
	Reversed  int    `json:"reversed"`
	Restored  int    `json:"restored"`
	Parked    string `json:"parked,omitempty"`
}

// handleStripeWebhook verifies a Stripe delivery before anything else, then records and applies it in
// one transaction (stripeevents). A parked event is still a 200, so Stripe stops retrying; a transient
// failure is a 503 with nothing written, so Stripe retries.
func handleStripeWebhook(d Deps) http.Handler {
	secrets := d.Config.WebhookSecrets
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(secrets) == 0 {
			writeError(w, r, d.Log, &Error{Status: http.StatusServiceUnavailable, Code: "webhook_not_configured",
				Message: "STRIPE_WEBHOOK_SECRET is not set"})
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxWebhookBody))
		if err != nil {
			apiErr := jsonError(err)
			d.Metrics.WebhookDeliveries.WithLabelValues("unverified", "rejected", apiErr.Code).Inc()
			writeError(w, r, d.Log, apiErr)
			return
		}
		_, span := d.Tracing.Start(r.Context(), "webhook.verify")
		err = verifyStripeSignature(body, r.Header.Get("Stripe-Signature"), secrets)
		span.End()
		if err != nil {
			var apiErr *Error
			errors.As(err, &apiErr)
			d.Metrics.WebhookDeliveries.WithLabelValues("unverified", "rejected", apiErr.Code).Inc()
			writeError(w, r, d.Log, err)
			return
		}
		res, err := d.Events.Process(r.Context(), body)
		outcome, reason := deliveryOutcome(res, err)
		d.Metrics.WebhookDeliveries.WithLabelValues(typeLabel(res.Type), outcome, reason).Inc()
		if err != nil {
			writeError(w, r, d.Log, err)
			return
		}
		writeJSON(w, http.StatusOK, webhookResponse{
			OK: true, Event: res.EventID, Duplicate: res.Duplicate, Credited: res.Credited,
			Reversed: res.Reversed, Restored: res.Restored, Parked: res.Parked,
		})
	})
}

// deliveryOutcome names what a delivery did, for the webhook metric.
func deliveryOutcome(res stripeevents.Result, err error) (outcome, reason string) {
	switch {
	case errors.Is(err, stripeevents.ErrInvalidEvent):
		return "rejected", "invalid_event"
	case err != nil:
		return "failed", ""
	case res.Duplicate:
		return "duplicate", ""
	case res.Credited:
		return "credited", ""
	default:
		return res.Outcome, res.Parked
	}
}

// typeLabel is the event type as a metric label: only the types the service handles are named, so
// that whoever holds the secret cannot grow /metrics without bound; "unknown" when the type could not
// be read, "other" for the rest.
func typeLabel(eventType string) string {
	switch {
	case eventType == "":
		return "unknown"
	case stripeevents.Handles(eventType):
		return eventType
	default:
		return "other"
	}
}

// signatureTolerance is how far a signature's timestamp may be from now, either way: older is a
// replay of a captured delivery, newer is a clock nobody should trust.
const signatureTolerance = 300 * time.Second

// verifyStripeSignature accepts the body when it is signed, within 300 s of now either way, by any of
// the secrets (several during a rotation), and is JSON. Only the signature is checked here, not the event's shape: stripe-go
// would decode the whole body into its types for one pinned api_version, while Stripe renders events in
// the endpoint's version; stripeevents reads the stable fields it needs, once.
func verifyStripeSignature(body []byte, header string, secrets []string) error {
	stamps := timestamps(header)
	if len(stamps) > 1 {
		// stripe-go verifies against the last t=; the future check below must read the same one, and
		// Stripe never sends two.
		return badRequest("invalid_signature", "the Stripe-Signature header holds more than one timestamp")
	}
	var err error
	for _, secret := range secrets {
		err = webhook.ValidatePayloadWithTolerance(body, header, secret, signatureTolerance)
		if !errors.Is(err, webhook.ErrNoValidSignature) {
			break
		}
	}
	switch {
	case err == nil && signedAt(stamps).After(time.Now().Add(signatureTolerance)):
		// stripe-go bounds only the age.
		return badRequest("stale_signature", "the signature's timestamp is more than 300 seconds ahead of now")
	case err == nil:
		if !json.Valid(body) {
			return badRequest("invalid_json", "body is not a JSON Stripe event")
		}
		return nil
	case errors.Is(err, webhook.ErrNotSigned):
		return badRequest("missing_signature", "the Stripe-Signature header is required")
	case errors.Is(err, webhook.ErrTooOld):
		return badRequest("stale_signature", "the signature's timestamp is older than 300 seconds")
	default: // webhook.ErrInvalidHeader, webhook.ErrNoValidSignature
		return badRequest("invalid_signature", "the Stripe-Signature header does not match the body")
	}
}

// timestamps are the t= values of a Stripe-Signature header, read as stripe-go reads its items.
func timestamps(header string) []string {
	var out []string
	for _, item := range strings.Split(header, ",") {
		if v, ok := strings.CutPrefix(item, "t="); ok {
			out = append(out, v)
		}
	}
	return out
}

// signedAt is the one timestamp of a Stripe-Signature header that stripe-go has verified.
func signedAt(stamps []string) time.Time {
	if len(stamps) != 1 {
		return time.Time{}
	}
	t, err := strconv.ParseInt(stamps[0], 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.Unix(t, 0)
}
