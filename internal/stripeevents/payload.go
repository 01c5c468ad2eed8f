package stripeevents

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The payload types below read only the fields the effects need, which Stripe has kept stable across
// API versions, so an event rendered at any api_version parses. stripe-go's typed objects follow its
// pinned version and are not used for events.

// event is the envelope of every Stripe event.
type event struct {
	ID         string `json:"id"`
	Type       string `json:"type"`
	APIVersion string `json:"api_version"`
	Livemode   bool   `json:"livemode"`
	Created    int64  `json:"created"`
	Data       struct {
		Object json.RawMessage `json:"object"`
	} `json:"data"`
	// chargePaymentIntent is the payment of a refund or dispute that names only its charge (older API
	// versions), found through the Stripe API before the transaction, or through its parking.
	chargePaymentIntent string
}

func (e event) createdAt() time.Time { return time.Unix(e.Created, 0).UTC() }

// Bounds on what a signed event may hold, so that hostile but signed input is refused (400) before
// anything is written, instead of failing a write (an index row too large, a timestamp out of range).
const (
	// maxIDLength bounds every Stripe id read (event, session, payment_intent, charge, refund,
	// dispute); Stripe's are far shorter.
	maxIDLength = 255
)

var (
	earliestCreated = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	latestCreated   = time.Date(2100, 12, 31, 23, 59, 59, 0, time.UTC).Unix()
)

// parseEvent reads the envelope; every error wraps ErrInvalidEvent.
func parseEvent(raw []byte) (event, error) {
	var ev event
	if err := json.Unmarshal(raw, &ev); err != nil {
		return event{}, fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	if !strings.HasPrefix(ev.ID, "evt_") || ev.Type == "" || len(ev.Data.Object) == 0 {
		return event{}, fmt.Errorf("%w: an event needs an evt_ id, a type and data.object", ErrInvalidEvent)
	}
	if err := checkIDs(ev.ID, ev.paymentIntent()); err != nil {
		return event{}, err
	}
	if ev.Created < earliestCreated || ev.Created > latestCreated {
		return event{}, fmt.Errorf("%w: created %d is not a time between 2000 and 2100", ErrInvalidEvent, ev.Created)
	}
	if len(ev.Type) > maxIDLength {
		return event{}, fmt.Errorf("%w: the type is longer than %d characters", ErrInvalidEvent, maxIDLength)
	}
	if err := storable(raw); err != nil {
		return event{}, fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	return ev, nil
}

// storable refuses the JSON that encoding/json reads but PostgreSQL's jsonb (in a UTF-8 database)
// cannot store, so that such a body is a 400 rather than a failed insert: bytes that are not UTF-8,
// the escape \u0000 (text cannot hold NUL), and a surrogate escape outside its pair. raw is valid
// JSON, so a backslash can only start an escape inside a string.
func storable(raw []byte) error {
	if !utf8.Valid(raw) {
		return errors.New("the event is not UTF-8")
	}
	errSurrogate := errors.New("the event holds a \\u surrogate escape outside its pair")
	high := false // the previous escape was a high surrogate, which a low one must follow at once
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			if high {
				return errSurrogate
			}
			continue
		}
		i++
		if raw[i] != 'u' {
			if high {
				return errSurrogate
			}
			continue
		}
		code, err := strconv.ParseUint(string(raw[i+1:i+5]), 16, 16)
		if err != nil {
			return errors.New("the event holds a malformed \\u escape")
		}
		i += 4
		switch {
		case code == 0:
			return errors.New("the event holds \\u0000, which PostgreSQL cannot store")
		case code >= 0xD800 && code < 0xDC00:
			if high {
				return errSurrogate
			}
			high = true
		case code >= 0xDC00 && code < 0xE000:
			if !high {
				return errSurrogate
			}
			high = false
		default:
			if high {
				return errSurrogate
			}
		}
	}
	if high {
		return errSurrogate
	}
	return nil
}

// paymentIntent is the payment the event's object belongs to (sessions, charges, refunds and disputes
// all name it, or their charge's does), or empty.
func (e event) paymentIntent() string {
	if strings.HasPrefix(e.Type, "payment_intent.") {
		// The object is the payment itself.
		var pi struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(e.Data.Object, &pi) == nil {
			return pi.ID
		}
		return ""
	}
	var o struct {
		PaymentIntent ref `json:"payment_intent"`
	}
	if json.Unmarshal(e.Data.Object, &o) != nil || o.PaymentIntent.ID == "" {
		return e.chargePaymentIntent
	}
	return o.PaymentIntent.ID
}

// onlyCharge returns the charge a refund or dispute names when it names no payment_intent (older API
// versions), or empty.
func (e event) onlyCharge() string {
	if !slices.Contains(refundTypes, e.Type) && !slices.Contains(disputeTypes, e.Type) {
		return ""
	}
	var o struct {
		PaymentIntent ref `json:"payment_intent"`
		Charge        ref `json:"charge"`
	}
	if json.Unmarshal(e.Data.Object, &o) != nil || o.PaymentIntent.ID != "" {
		return ""
	}
	return o.Charge.ID
}

// needsRefundList: a charge.refunded whose payload does not list all its refunds, so that applying it
// calls the Stripe API.
func (e event) needsRefundList() bool {
	var c charge
	if e.Type != "charge.refunded" || json.Unmarshal(e.Data.Object, &c) != nil {
		return false
	}
	_, listed := c.listedRefunds()
	return !listed
}

// checkIDs refuses an id longer than maxIDLength.
func checkIDs(ids ...string) error {
	for _, id := range ids {
		if len(id) > maxIDLength {
			return fmt.Errorf("%w: an id of %d characters (at most %d)", ErrInvalidEvent, len(id), maxIDLength)
		}
	}
	return nil
}

// identified is a payload object that names other Stripe objects by id.
type identified interface{ ids() []string }

// object decodes data.object into dst and bounds the ids it names.
func (e event) object(dst identified) error {
	if err := json.Unmarshal(e.Data.Object, dst); err != nil {
		return fmt.Errorf("%w: %s data.object: %w", ErrInvalidEvent, e.Type, err)
	}
	return checkIDs(dst.ids()...)
}

// ref is a field Stripe renders either as an id or, when expanded, as the object itself. The object's
// metadata is kept: an expanded charge may name the account.
type ref struct {
	ID       string
	Metadata map[string]string
}

func (r *ref) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		return nil
	case len(b) > 0 && b[0] == '"':
		return json.Unmarshal(b, &r.ID)
	}
	var obj struct {
		ID       string            `json:"id"`
		Metadata map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		return errors.New("expected an id or an object")
	}
	r.ID, r.Metadata = obj.ID, obj.Metadata
	return nil
}

// checkoutSession is a Checkout Session: the top-up's payment.
type checkoutSession struct {
	ID                string            `json:"id"`
	PaymentStatus     string            `json:"payment_status"`
	AmountTotal       int64             `json:"amount_total"`
	Currency          string            `json:"currency"`
	ClientReferenceID string            `json:"client_reference_id"`
	Metadata          map[string]string `json:"metadata"`
	PaymentIntent     ref               `json:"payment_intent"`
	// Customer is set when the session saves the card (save_payment_method).
	Customer ref `json:"customer"`
}

func (s *checkoutSession) ids() []string { return []string{s.ID, s.PaymentIntent.ID, s.Customer.ID} }

// accountID is the account the session pays for: metadata.account_id, else client_reference_id.
func (s checkoutSession) accountID() string {
	if id := s.Metadata["account_id"]; id != "" {
		return id
	}
	return s.ClientReferenceID
}

// refund is a refund object, from an event or from the Stripe API.
type refund struct {
	ID            string `json:"id"`
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	Status        string `json:"status"`
	PaymentIntent ref    `json:"payment_intent"`
	Charge        ref    `json:"charge"`
}

func (r *refund) ids() []string { return []string{r.ID, r.PaymentIntent.ID, r.Charge.ID} }

// charge is a charge object as charge.refunded carries it. Its refunds list is absent on API versions
// from 2022-11-15 on; amount_refunded is deliberately not read (it is cumulative).
type charge struct {
	ID            string            `json:"id"`
	PaymentIntent ref               `json:"payment_intent"`
	Metadata      map[string]string `json:"metadata"`
	Refunds       *struct {
		Data    []refund `json:"data"`
		HasMore bool     `json:"has_more"`
	} `json:"refunds"`
}

func (c *charge) ids() []string {
	ids := []string{c.ID, c.PaymentIntent.ID}
	if c.Refunds != nil {
		for _, r := range c.Refunds.Data {
			ids = append(ids, r.ids()...)
		}
	}
	return ids
}

// listedRefunds returns the refunds the payload lists, and whether that list is complete.
func (c charge) listedRefunds() ([]refund, bool) {
	if c.Refunds == nil || c.Refunds.HasMore {
		return nil, false
	}
	return c.Refunds.Data, true
}

// dispute is a dispute object.
type dispute struct {
	ID                   string `json:"id"`
	Amount               int64  `json:"amount"`
	Currency             string `json:"currency"`
	Status               string `json:"status"`
	PaymentIntent        ref    `json:"payment_intent"`
	Charge               ref    `json:"charge"`
	PaymentMethodDetails struct {
		Card struct {
			CaseType string `json:"case_type"`
		} `json:"card"`
	} `json:"payment_method_details"`
}

func (d *dispute) ids() []string { return []string{d.ID, d.PaymentIntent.ID, d.Charge.ID} }

// isInquiry: an inquiry (a warning_* status, or case_type inquiry) moves no money.
func (d dispute) isInquiry() bool {
	return isInquiry(d.Status, d.PaymentMethodDetails.Card.CaseType)
}

func isInquiry(status, caseType string) bool {
	return caseType == "inquiry" || strings.HasPrefix(status, "warning_")
}
