// Package stripefake is a loopback stand-in for the Stripe API endpoints onceledger calls — creating a
// Checkout Session and a customer (the API's top-ups), creating an off-session PaymentIntent (auto-recharge),
// retrieving a PaymentIntent (the card a session saved), listing a charge's refunds (the webhook's charge.refunded),
// retrieving a charge (a refund or dispute naming only its charge), listing events (the reconciler's missed-webhook search),
// and listing and retrieving Checkout Sessions, PaymentIntents, refunds and disputes (the drift pass) — and signs
// webhook payloads as Stripe does.
// The demo, the bench and the tests share it; it is never Stripe, and says so in its errors.
package stripefake

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stripe/stripe-go/v79/webhook"
)

// SecretKey is an API key for the stand-in: any non-empty key is accepted.
const SecretKey = "sk_test_stripefake"

// Server answers the Stripe API from what it was told. It lists one item per page, so that every
// listing exercises stripe-go's auto-pagination. Its methods are safe for concurrent use.
type Server struct {
	*httptest.Server

	// OnCheckoutSession, when set before the first call, sees each session request's form while the
	// caller waits for the answer (what the caller had written before calling Stripe).
	OnCheckoutSession func(form url.Values)

	mu       sync.Mutex
	sessions []url.Values
	byKey    map[string][]byte            // Idempotency-Key → the session answered for it
	refunds  map[string][]json.RawMessage // charge id → its refunds, newest first
	charges  map[string]json.RawMessage   // charge id → the charge
	events   []json.RawMessage            // the events whose delivery failed, newest first
	queries  []url.Values                 // of every GET /v1/events
	calls    int
	failWith int
	hang     bool

	intents        map[string]json.RawMessage   // PaymentIntent id → the PaymentIntent retrieved
	objects        map[string][]json.RawMessage // a listing's path → what it lists, newest first (SetObjects)
	listQueries    map[string][]url.Values      // a listing's path → the query of each page asked for
	customers      []url.Values
	paymentIntents []url.Values // every PaymentIntent created, in order
	intentRequests []string     // the Idempotency-Key of every PaymentIntent request, answered or not
	loseAnswers    int          // PaymentIntents created whose answer is then lost (a 500)
}

// New starts a stand-in; Close stops it.
func New() *Server {
	s := &Server{
		refunds: map[string][]json.RawMessage{}, charges: map[string]json.RawMessage{}, byKey: map[string][]byte{},
		intents: map[string]json.RawMessage{}, objects: map[string][]json.RawMessage{}, listQueries: map[string][]url.Values{},
	}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// SetRefunds is what the refund list of charge says from now on. Each refund is a refund object.
func (s *Server) SetRefunds(charge string, refunds ...map[string]any) {
	list := make([]json.RawMessage, len(refunds))
	for i, r := range refunds {
		list[i] = mustJSON(r)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refunds[charge] = list
}

// SetCharge makes GET /v1/charges/{id} answer a charge of paymentIntent; an unknown charge is a 404.
func (s *Server) SetCharge(id, paymentIntent string) {
	c := mustJSON(map[string]any{"id": id, "object": "charge", "payment_intent": paymentIntent})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.charges[id] = c
}

// SetEvents is what GET /v1/events lists from now on (whatever its filters), each a whole event.
func (s *Server) SetEvents(events ...[]byte) {
	list := make([]json.RawMessage, len(events))
	for i, e := range events {
		list[i] = e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = list
}

// FailWith makes every call answer status with a Stripe error body (a 5xx is an api_error, a 4xx an
// invalid_request_error) until FailWith(0).
func (s *Server) FailWith(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failWith = status
}

// Hang makes every call be accepted and never answered, each waiting until its caller gives up (a
// Stripe that hangs), until Hang(false).
func (s *Server) Hang(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hang = on
}

// Sessions returns the form of every Checkout Session created so far, in order (a request answered
// by its Idempotency-Key creates none).
func (s *Server) Sessions() []url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]url.Values(nil), s.sessions...)
}

// EventQueries returns the query of every GET /v1/events so far, one per page, in order.
func (s *Server) EventQueries() []url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]url.Values(nil), s.queries...)
}

// Calls counts every request, answered or failed.
func (s *Server) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.mu.Lock()
	s.calls++
	failWith, hang := s.failWith, s.hang
	s.mu.Unlock()
	if hang {
		<-r.Context().Done()
		return
	}
	if failWith != 0 {
		writeError(w, failWith, "the stand-in was told to fail")
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/checkout/sessions":
		s.checkoutSession(w, r.PostForm, r.Header.Get("Idempotency-Key"))
	case r.Method == http.MethodPost && r.URL.Path == "/v1/customers":
		s.customer(w, r.PostForm, r.Header.Get("Idempotency-Key"))
	case r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents":
		s.paymentIntent(w, r.PostForm, r.Header.Get("Idempotency-Key"))
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/payment_intents/"):
		s.mu.Lock()
		pi, ok := s.intents[strings.TrimPrefix(r.URL.Path, "/v1/payment_intents/")]
		s.mu.Unlock()
		if !ok {
			s.retrieve(w, r.URL.Path)
			return
		}
		_, _ = w.Write(pi)
	case r.Method == http.MethodGet && listings[r.URL.Path] && (r.URL.Path != "/v1/refunds" || r.Form.Get("charge") == ""):
		s.list(w, r)
	case r.Method == http.MethodGet && (strings.HasPrefix(r.URL.Path, "/v1/refunds/") || strings.HasPrefix(r.URL.Path, "/v1/disputes/")):
		s.retrieve(w, r.URL.Path)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/refunds" && r.Form.Get("charge") != "":
		s.mu.Lock()
		refunds := s.refunds[r.Form.Get("charge")]
		s.mu.Unlock()
		writePage(w, r, "/v1/refunds", refunds)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/charges/"):
		s.mu.Lock()
		c, ok := s.charges[strings.TrimPrefix(r.URL.Path, "/v1/charges/")]
		s.mu.Unlock()
		if !ok {
			writeError(w, http.StatusNotFound, "No such charge")
			return
		}
		_, _ = w.Write(c)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/events":
		s.mu.Lock()
		s.queries = append(s.queries, r.URL.Query())
		events := s.events
		s.mu.Unlock()
		writePage(w, r, "/v1/events", events)
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("the Stripe stand-in does not serve %s %s", r.Method, r.URL.Path))
	}
}

// checkoutSession answers a new open session cs_test_N, echoing the account the request names. As
// Stripe does, a request repeating an earlier one's Idempotency-Key gets that one's session, and
// creates none.
func (s *Server) checkoutSession(w http.ResponseWriter, form url.Values, idempotencyKey string) {
	if s.OnCheckoutSession != nil {
		s.OnCheckoutSession(form)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if answered, ok := s.byKey[idempotencyKey]; ok && idempotencyKey != "" {
		_, _ = w.Write(answered)
		return
	}
	s.sessions = append(s.sessions, form)
	id := fmt.Sprintf("cs_test_%d", len(s.sessions))
	session := mustJSON(map[string]any{
		"id": id, "object": "checkout.session", "mode": "payment", "status": "open", "payment_status": "unpaid",
		"url":                 "https://checkout.stripe.com/c/pay/" + id,
		"client_reference_id": form.Get("client_reference_id"),
		"metadata": map[string]string{
			"account_id": form.Get("metadata[account_id]"), "topup_id": form.Get("metadata[topup_id]"),
		},
	})
	s.byKey[idempotencyKey] = session
	_, _ = w.Write(session)
}

// customer answers a new customer cus_test_N; a repeated Idempotency-Key gets the same one.
func (s *Server) customer(w http.ResponseWriter, form url.Values, idempotencyKey string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if answered, ok := s.byKey[idempotencyKey]; ok && idempotencyKey != "" {
		_, _ = w.Write(answered)
		return
	}
	s.customers = append(s.customers, form)
	c := mustJSON(map[string]any{"id": fmt.Sprintf("cus_test_%d", len(s.customers)), "object": "customer"})
	s.byKey[idempotencyKey] = c
	_, _ = w.Write(c)
}

// paymentIntent answers a new PaymentIntent pi_test_N; as Stripe does, a request repeating an earlier
// one's Idempotency-Key gets that one's PaymentIntent and creates none. LoseAnswers makes it create the
// PaymentIntent and then answer a 500, as when the connection drops after Stripe acted.
func (s *Server) paymentIntent(w http.ResponseWriter, form url.Values, idempotencyKey string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.intentRequests = append(s.intentRequests, idempotencyKey)
	answered, ok := s.byKey[idempotencyKey]
	if !ok || idempotencyKey == "" {
		s.paymentIntents = append(s.paymentIntents, form)
		amount, _ := strconv.ParseInt(form.Get("amount"), 10, 64)
		answered = mustJSON(map[string]any{
			"id": fmt.Sprintf("pi_test_%d", len(s.paymentIntents)), "object": "payment_intent", "status": "succeeded",
			"amount": amount, "currency": form.Get("currency"), "customer": form.Get("customer"),
			"payment_method": form.Get("payment_method"),
			"metadata":       map[string]string{"account_id": form.Get("metadata[account_id]"), "topup_id": form.Get("metadata[topup_id]")},
		})
		s.byKey[idempotencyKey] = answered
	}
	if s.loseAnswers > 0 {
		s.loseAnswers--
		writeError(w, http.StatusInternalServerError, "the stand-in lost its answer")
		return
	}
	_, _ = w.Write(answered)
}

// SetPaymentIntent is what retrieving PaymentIntent id answers from now on: a succeeded payment of
// customer that saved paymentMethod for off-session use (a Checkout Session with save_payment_method).
func (s *Server) SetPaymentIntent(id, customer, paymentMethod string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.intents[id] = mustJSON(map[string]any{
		"id": id, "object": "payment_intent", "status": "succeeded", "customer": customer,
		"payment_method": paymentMethod, "setup_future_usage": "off_session",
	})
}

// LoseAnswers makes the next n PaymentIntent requests act and then answer a 500.
func (s *Server) LoseAnswers(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loseAnswers = n
}

// PaymentIntents returns the form of every PaymentIntent created so far, in order.
func (s *Server) PaymentIntents() []url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]url.Values(nil), s.paymentIntents...)
}

// PaymentIntentKeys returns the Idempotency-Key of every PaymentIntent request so far, in order.
func (s *Server) PaymentIntentKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.intentRequests...)
}

// Customers returns the form of every customer created so far, in order.
func (s *Server) Customers() []url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]url.Values(nil), s.customers...)
}

// listings are the paths SetObjects fills.
var listings = map[string]bool{
	"/v1/checkout/sessions": true, "/v1/payment_intents": true, "/v1/refunds": true, "/v1/disputes": true,
}

// SetObjects is what the listing at path (/v1/checkout/sessions, /v1/payment_intents, /v1/refunds or
// /v1/disputes) holds from now on, each a whole Stripe object with its id and created. As Stripe does, it
// lists them newest first, a page of the request's limit at a time, filtered by created[gte] and
// created[lt], and retrieves each by id at path/{id}.
func (s *Server) SetObjects(path string, objects ...map[string]any) {
	list := make([]json.RawMessage, len(objects))
	for i, o := range objects {
		list[i] = mustJSON(o)
	}
	slices.SortStableFunc(list, func(a, b json.RawMessage) int { return cmp.Compare(created(b), created(a)) })
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objects[path] = list
}

// created is an object's created.
func created(object json.RawMessage) int64 {
	var o struct {
		Created int64 `json:"created"`
	}
	_ = json.Unmarshal(object, &o)
	return o.Created
}

// ListQueries returns the query of every page of the listing at path asked for so far, in order.
func (s *Server) ListQueries(path string) []url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]url.Values(nil), s.listQueries[path]...)
}

// list answers one page of a SetObjects listing.
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.listQueries[r.URL.Path] = append(s.listQueries[r.URL.Path], r.URL.Query())
	all := s.objects[r.URL.Path]
	s.mu.Unlock()
	gte, _ := strconv.ParseInt(r.Form.Get("created[gte]"), 10, 64)
	lt, err := strconv.ParseInt(r.Form.Get("created[lt]"), 10, 64)
	if err != nil {
		lt = math.MaxInt64
	}
	var items []json.RawMessage
	for _, item := range all {
		var o struct {
			Status string `json:"status"`
		}
		_ = json.Unmarshal(item, &o)
		if c := created(item); c < gte || c >= lt || (r.Form.Get("status") != "" && o.Status != r.Form.Get("status")) {
			continue
		}
		items = append(items, item)
	}
	limit, err := strconv.Atoi(r.Form.Get("limit"))
	if err != nil || limit < 1 || limit > 100 {
		limit = 10 // Stripe's default
	}
	writeItems(w, r, r.URL.Path, items, limit)
}

// retrieve answers the object of a SetObjects listing whose id ends path, or a 404 as Stripe does.
func (s *Server) retrieve(w http.ResponseWriter, path string) {
	i := strings.LastIndex(path, "/")
	s.mu.Lock()
	all := s.objects[path[:i]]
	s.mu.Unlock()
	for _, item := range all {
		var o struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(item, &o) == nil && o.ID == path[i+1:] {
			_, _ = w.Write(item)
			return
		}
	}
	writeError(w, http.StatusNotFound, "No such object: '"+path[i+1:]+"'")
}

// writePage answers one item of items, the one after starting_after, as a Stripe list.
func writePage(w http.ResponseWriter, r *http.Request, path string, items []json.RawMessage) {
	writeItems(w, r, path, items, 1)
}

// writeItems answers the page of at most limit items after the one starting_after names.
func writeItems(w http.ResponseWriter, r *http.Request, path string, items []json.RawMessage, limit int) {
	start := 0
	if after := r.Form.Get("starting_after"); after != "" {
		for i, item := range items {
			var o struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(item, &o) == nil && o.ID == after {
				start = i + 1
			}
		}
	}
	page := append([]json.RawMessage{}, items[start:min(start+limit, len(items))]...)
	_, _ = w.Write(mustJSON(map[string]any{"object": "list", "url": path, "data": page, "has_more": start+limit < len(items)}))
}

func writeError(w http.ResponseWriter, status int, message string) {
	kind := "invalid_request_error"
	if status >= 500 {
		kind = "api_error"
	}
	w.WriteHeader(status)
	_, _ = w.Write(mustJSON(map[string]any{"error": map[string]string{"type": kind, "message": message}}))
}

// Sign returns the Stripe-Signature header Stripe would send with payload, signed with secret at at.
func Sign(payload []byte, secret string, at time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: at}).Header
}

// Event returns a Stripe event of eventType around object, as an endpoint at apiVersion receives it.
func Event(id, eventType, apiVersion string, object map[string]any) []byte {
	return mustJSON(map[string]any{
		"id": id, "object": "event", "api_version": apiVersion, "created": time.Now().Unix(),
		"livemode": false, "pending_webhooks": 1, "type": eventType,
		"data": map[string]any{"object": object}, "request": map[string]any{"id": nil, "idempotency_key": nil},
	})
}

// mustJSON encodes what this package built itself, which always encodes.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
