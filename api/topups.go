package api

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"github.com/stripe/stripe-go/v79"

	"github.com/onceledger/onceledger/db"
)

// topupIDPattern takes every top-up id there is: those the service mints (top_… for the API's orders,
// rch_… for recharge attempts), and the Checkout Session id an order paid without one is stored under,
// which Stripe makes of [A-Za-z0-9_] (66 characters for a live session) and the webhook bounds at 255.
var topupIDPattern = idPattern{max: 255}

type topupJSON struct {
	ID            string     `json:"id"`
	AccountID     string     `json:"account_id"`
	Amount        int64      `json:"amount"`
	Credits       int64      `json:"credits"`
	Currency      string     `json:"currency"`
	Status        string     `json:"status"`
	CheckoutURL   *string    `json:"checkout_url"`
	SessionID     *string    `json:"session_id"`
	PaymentIntent *string    `json:"payment_intent"`
	CreatedAt     time.Time  `json:"created_at"`
	PaidAt        *time.Time `json:"paid_at"`
}

func topupOut(t db.Topup) topupJSON {
	return topupJSON{
		ID: t.ID, AccountID: t.AccountID, Amount: t.Amount, Credits: t.Credits, Currency: t.Currency, Status: t.Status,
		CheckoutURL: orNull(t.CheckoutURL), SessionID: orNull(t.SessionID), PaymentIntent: orNull(t.PaymentIntent),
		CreatedAt: t.CreatedAt, PaidAt: t.PaidAt,
	}
}

type topupResponse struct {
	Topup topupJSON `json:"topup"`
}

// handlePostTopup creates a pending top-up order and its Stripe Checkout Session. The order is
// written first, so the session can name it in its metadata (topup_id) and the webhook can find it;
// the Stripe call holds no transaction or lock. If Stripe fails, the order stays pending without a
// session and is never paid: nothing can complete a session that was not created.
//
// With an Idempotency-Key, the account's order under that key (topups_idempotency_key) is the answer
// to every retry of the same body (200), even concurrent ones: they share the order, and so Stripe's
// idempotency key topup:{order id}, which answers them all the same session. Another body is 409.
func handlePostTopup(d Deps) http.Handler {
	type request struct {
		// Amount is the price, in the minor units of Currency; Credits what it buys (default: Amount).
		Amount  *int64 `json:"amount"`
		Credits *int64 `json:"credits"`
		// Currency defaults to the account's; only an account counted in credits may be paid in another.
		Currency   *string `json:"currency"`
		SuccessURL *string `json:"success_url"`
		CancelURL  *string `json:"cancel_url"`
		// SavePaymentMethod saves the card for off-session use (auto-recharge, SPEC §13).
		SavePaymentMethod bool `json:"save_payment_method"`
	}
	sc := d.Stripe
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		if sc == nil {
			return errStripeNotConfigured
		}
		var req request
		id, err := decodeAccountRequest(w, r, &req)
		if err != nil {
			return err
		}
		if req.Amount == nil || *req.Amount <= 0 || *req.Amount > maxAmount {
			return badRequest("invalid_amount", "amount is required: a positive whole number of minor units, at most 10^15")
		}
		if req.SuccessURL == nil || !webURL(*req.SuccessURL) {
			return badRequest("invalid_success_url", "success_url is required: an absolute http(s) URL")
		}
		if req.CancelURL != nil && !webURL(*req.CancelURL) {
			return badRequest("invalid_cancel_url", "cancel_url must be an absolute http(s) URL")
		}
		if req.Credits != nil && (*req.Credits <= 0 || *req.Credits > maxAmount) {
			return badRequest("invalid_credits", "credits must be a positive whole number, at most 10^15")
		}
		if req.Currency != nil && !currencyPattern.MatchString(*req.Currency) {
			return badRequest("invalid_currency", `currency must be a lower-case ISO 4217 code such as "usd"`)
		}
		key, err := optionalIdempotencyKey(r)
		if err != nil {
			return err
		}
		acct, err := getAccount(r, d, id)
		if err != nil {
			return err
		}
		credits, currency := *req.Amount, acct.Currency
		if req.Credits != nil {
			credits = *req.Credits
		}
		if req.Currency != nil {
			currency = *req.Currency
		}
		if acct.Unit != db.UnitCredits && currency != acct.Currency {
			return badRequest("invalid_currency", fmt.Sprintf("currency must be the account's (%s): its balance counts that currency's minor unit", acct.Currency))
		}

		order, created, err := db.InsertPendingTopup(r.Context(), d.Pool, db.Topup{
			ID: newTopupID(), AccountID: acct.ID, Amount: *req.Amount, Credits: credits, Currency: currency,
			IdempotencyKey:     key,
			RequestFingerprint: topupFingerprint(key, *req.Amount, req.Credits, req.Currency, *req.SuccessURL, req.CancelURL, req.SavePaymentMethod),
		})
		if err != nil {
			return err
		}
		status := http.StatusCreated
		if !created {
			status = http.StatusOK
			if order.SessionID != "" {
				writeJSON(w, status, topupResponse{Topup: topupOut(order)})
				return nil
			}
			// The first request is still calling Stripe, or failed to: ask again under the same
			// idempotency key.
		}
		// The request's record commits with the session, which completes the order.
		answersOnEffect(r, status)
		params := &stripe.CheckoutSessionParams{
			Mode:              stripe.String(string(stripe.CheckoutSessionModePayment)),
			SuccessURL:        req.SuccessURL,
			CancelURL:         req.CancelURL,
			ClientReferenceID: stripe.String(acct.ID),
			Metadata:          map[string]string{"account_id": acct.ID, "topup_id": order.ID},
			PaymentIntentData: &stripe.CheckoutSessionPaymentIntentDataParams{
				Metadata: map[string]string{"account_id": acct.ID, "topup_id": order.ID},
			},
			LineItems: []*stripe.CheckoutSessionLineItemParams{{
				Quantity: stripe.Int64(1),
				PriceData: &stripe.CheckoutSessionLineItemPriceDataParams{
					Currency:    stripe.String(order.Currency),
					UnitAmount:  stripe.Int64(order.Amount),
					ProductData: &stripe.CheckoutSessionLineItemPriceDataProductDataParams{Name: stripe.String("onceledger credits")},
				},
			}},
		}
		if req.SavePaymentMethod {
			customer, err := stripeCustomer(r, d, acct.ID)
			if err != nil {
				return err
			}
			params.Customer = stripe.String(customer)
			params.PaymentIntentData.SetupFutureUsage = stripe.String(string(stripe.PaymentIntentSetupFutureUsageOffSession))
		}
		// A retried request inside Stripe's idempotency window returns the same session.
		params.SetIdempotencyKey("topup:" + order.ID)
		params.Context = r.Context()
		session, err := sc.CheckoutSessions.New(params)
		if err != nil {
			d.Log.WarnContext(r.Context(), "checkout session not created", "topup", order.ID, "err", err)
			return stripeFailure(err)
		}
		order, err = db.SetTopupSession(r.Context(), d.Pool, order.ID, session.ID, session.URL)
		if err != nil {
			return fmt.Errorf("attach session %s to top-up: %w", session.ID, err)
		}
		writeJSON(w, status, topupResponse{Topup: topupOut(order)})
		return nil
	})
}

// stripeCustomer is the account's Stripe customer, created once (Stripe idempotency key
// customer:{account_id}, so concurrent first requests get the same one) and recorded before the session
// names it: the completed session and its payment then find it on the account.
func stripeCustomer(r *http.Request, d Deps, accountID string) (string, error) {
	settings, err := db.GetAutomation(r.Context(), d.Pool, accountID)
	if err != nil {
		return "", err
	}
	if settings.StripeCustomer != "" {
		return settings.StripeCustomer, nil
	}
	params := &stripe.CustomerParams{Metadata: map[string]string{"account_id": accountID}}
	params.SetIdempotencyKey("customer:" + accountID)
	params.Context = r.Context()
	c, err := d.Stripe.Customers.New(params)
	if err != nil {
		d.Log.WarnContext(r.Context(), "stripe customer not created", "account", accountID, "err", err)
		return "", stripeFailure(err)
	}
	if err := db.SetStripeCustomer(r.Context(), d.Pool, accountID, c.ID); err != nil {
		return "", err
	}
	// Recorded by this call or an earlier one: the account's customer is the one stored.
	settings, err = db.GetAutomation(r.Context(), d.Pool, accountID)
	if err != nil {
		return "", err
	}
	return settings.StripeCustomer, nil
}

// optionalIdempotencyKey is the request's Idempotency-Key, or empty when it sent none.
func optionalIdempotencyKey(r *http.Request) (string, error) {
	if len(r.Header.Values("Idempotency-Key")) == 0 {
		return "", nil
	}
	return idempotencyKey(r)
}

// topupFingerprint digests what a top-up request asks for, so that a key reused with another body is
// recognised; empty without a key.
func topupFingerprint(key string, amount int64, credits *int64, currency *string, successURL string, cancelURL *string, saveCard bool) string {
	if key == "" {
		return ""
	}
	cancel := "none"
	if cancelURL != nil {
		cancel = "url " + *cancelURL
	}
	fields := []string{strconv.FormatInt(amount, 10), successURL, cancel}
	if saveCard {
		// Only when asked, so the fingerprints of requests stored before the field existed still match.
		fields = append(fields, "save_payment_method")
	}
	// Likewise credits and currency, only when named.
	if credits != nil {
		fields = append(fields, "credits "+strconv.FormatInt(*credits, 10))
	}
	if currency != nil {
		fields = append(fields, "currency "+*currency)
	}
	h := sha256.New()
	for _, field := range fields {
		fmt.Fprintf(h, "%d:%s", len(field), field)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func handleGetTopup(d Deps) http.Handler {
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		id := mux.Vars(r)["id"]
		if !topupIDPattern.MatchString(id) {
			return badRequest("invalid_topup_id", "top-up id must be 1-255 characters of [A-Za-z0-9_.:-]")
		}
		order, err := db.GetTopup(r.Context(), d.Pool, id)
		if errors.Is(err, db.ErrNotFound) {
			return &Error{Status: http.StatusNotFound, Code: "topup_not_found", Message: "no top-up " + id}
		}
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, topupResponse{Topup: topupOut(order)})
		return nil
	})
}

// stripeFailure answers a failed Stripe call: Stripe refusing the request (an amount below its
// minimum, say) is the caller's to fix; anything else is Stripe or the network being unavailable.
func stripeFailure(err error) error {
	var se *stripe.Error
	if errors.As(err, &se) && (se.HTTPStatusCode == http.StatusBadRequest || se.HTTPStatusCode == http.StatusPaymentRequired) {
		return &Error{Status: http.StatusUnprocessableEntity, Code: "stripe_rejected", Message: "Stripe refused the Checkout Session: " + se.Msg}
	}
	return &Error{Status: http.StatusServiceUnavailable, Code: "stripe_unavailable", Message: "Stripe could not be reached; try again"}
}

func webURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// newTopupID names a new order; the random part makes ids unguessable and collision-free in practice.
func newTopupID() string {
	return "top_" + strings.ToLower(rand.Text())
}
