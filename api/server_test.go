package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/access"
	"github.com/onceledger/onceledger/internal/config"
)

// The test keys: testAPIKey (admin, bare) is what call sends unless told otherwise.
const (
	testAPIKey   = "test_key_1_onceledger_api_tests_00"
	otherAPIKey  = "other_key_onceledger_api_tests_000"
	spendAPIKey  = "spend_key_onceledger_api_tests_000"
	readAPIKey   = "read_key_onceledger_api_tests_0000"
	creditAPIKey = "credit_key_onceledger_api_tests_00"
)

// testKeys parses entries as ONCELEDGER_API_KEYS would.
func testKeys(t testing.TB, entries ...string) access.Keys {
	t.Helper()
	keys, err := access.Parse(entries)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// server is the real handler on a fresh database, reached over HTTP.
type server struct {
	t    *testing.T
	url  string
	pool *pgxpool.Pool
	// handler is what the server serves, for requests sent to it in-process.
	handler http.Handler
}

// newServer serves api.NewHandler on a fresh database with testAPIKey accepted; configure may change
// the configuration first.
func newServer(t *testing.T, configure ...func(*config.Config)) *server {
	t.Helper()
	return newServerOn(t, dbtest.New(t), configure...)
}

// newServerOn is newServer on the database of pool.
func newServerOn(t *testing.T, pool *pgxpool.Pool, configure ...func(*config.Config)) *server {
	t.Helper()
	return newServerWith(t, pool, func(*Deps) {}, configure...)
}

// newServerWith is newServerOn with the wired deps changed by wire last.
func newServerWith(t *testing.T, pool *pgxpool.Pool, wire func(*Deps), configure ...func(*config.Config)) *server {
	t.Helper()
	cfg := config.Config{APIKeys: testKeys(t, otherAPIKey, testAPIKey, "product:spend:"+spendAPIKey,
		"finance:read:"+readAPIKey, "support:credit+read:"+creditAPIKey)}
	for _, c := range configure {
		c(&cfg)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	d := WiredDeps(pool, cfg, log, db.LedgerConfig{})
	wire(&d)
	h := NewHandler(d)
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return &server{t: t, url: ts.URL, pool: pool, handler: h}
}

// newPatientServer is newServer with a throttle that never refuses: for the tests that try many wrong
// keys on purpose.
func newPatientServer(t *testing.T) *server {
	t.Helper()
	return newServerWith(t, dbtest.New(t), func(d *Deps) { d.Throttle = &access.Throttle{FreeFailures: math.MaxInt} })
}

// in returns s reporting to t, for use inside a subtest.
func (s *server) in(t *testing.T) *server {
	c := *s
	c.t = t
	return &c
}

// reply is one response, its body decoded as far as JSON allows.
type reply struct {
	Status int
	Header http.Header
	Body   []byte
	JSON   map[string]any
}

// code is the error code of an error reply, "" otherwise.
func (r reply) code() string {
	if e, ok := r.JSON["error"].(map[string]any); ok {
		code, _ := e["code"].(string)
		return code
	}
	return ""
}

// call sends body (a string is sent as is, anything else as JSON) with the test API key unless
// headers set Authorization (to "" for none), and checks the response against openapi.yaml.
func (s *server) call(method, path string, body any, headers ...string) reply {
	s.t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			s.t.Fatal(err)
		}
	}
	req, err := http.NewRequest(method, s.url+path, bytes.NewReader(raw))
	if err != nil {
		s.t.Fatal(err)
	}
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+testAPIKey)
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	out := reply{Status: resp.StatusCode, Header: resp.Header}
	if out.Body, err = io.ReadAll(resp.Body); err != nil {
		s.t.Fatal(err)
	}
	_ = json.Unmarshal(out.Body, &out.JSON)
	if err := conformsToDocument(req, resp, out.Body); err != nil {
		s.t.Errorf("%s %s → %d %.300s\ndoes not conform to openapi.yaml: %.2000v", method, path, resp.StatusCode, out.Body, err)
	}
	return out
}

// want fails the test unless the reply has status and, for errors, code.
func (r reply) want(t *testing.T, status int, code string) reply {
	t.Helper()
	if r.Status != status || r.code() != code {
		t.Fatalf("got %d %q, want %d %q; body %s", r.Status, r.code(), status, code, r.Body)
	}
	return r
}

var (
	documentOnce   sync.Once
	document       *openapi3.T
	documentRouter routers.Router
	documentErr    error
)

func loadDocument() (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openAPIDocument)
	if err != nil {
		return nil, err
	}
	return doc, doc.Validate(loader.Context)
}

// conformsToDocument checks a response against the document: its route, status, and body schema.
func conformsToDocument(req *http.Request, resp *http.Response, body []byte) error {
	documentOnce.Do(func() {
		if document, documentErr = loadDocument(); documentErr == nil {
			documentRouter, documentErr = gorillamux.NewRouter(document)
		}
	})
	if documentErr != nil {
		return documentErr
	}
	// The document's server is "/": route on the path alone.
	routed := req.Clone(context.Background())
	routed.URL.Scheme, routed.URL.Host, routed.Host = "", "", ""
	route, params, err := documentRouter.FindRoute(routed)
	if err != nil {
		return err
	}
	return openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: routed, PathParams: params, Route: route},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	})
}

// createAccount creates an account through the API and credits it with credit (when > 0).
func (s *server) createAccount(id, currency string, credit int64) {
	s.t.Helper()
	s.call(http.MethodPut, "/v1/accounts/"+id, map[string]string{"currency": currency}).want(s.t, http.StatusCreated, "")
	if credit > 0 {
		s.call(http.MethodPost, "/v1/accounts/"+id+"/adjustments", map[string]any{"amount": credit, "description": "opening credit"},
			"Idempotency-Key", "opening-credit").want(s.t, http.StatusCreated, "")
	}
}

func (s *server) balance(id string) int64 {
	s.t.Helper()
	acct, err := db.GetAccount(context.Background(), s.pool, id)
	if err != nil {
		s.t.Fatal(err)
	}
	return acct.Balance
}

// wantMoney fails the test unless the account's balance and number of entries are these.
func (s *server) wantMoney(account string, balance, entries int64) {
	s.t.Helper()
	if b := s.balance(account); b != balance {
		s.t.Fatalf("%s: balance %d, want %d", account, b, balance)
	}
	if n := s.count(`SELECT count(*) FROM ledger WHERE account_id = $1`, account); n != entries {
		s.t.Fatalf("%s: %d entries, want %d", account, n, entries)
	}
}

// count returns the single integer a query answers.
func (s *server) count(query string, args ...any) int64 {
	s.t.Helper()
	var n int64
	if err := s.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		s.t.Fatal(err)
	}
	return n
}

// post writes entries straight through the ledger, for fixtures that need many of them fast.
func (s *server) post(ps ...db.Posting) {
	s.t.Helper()
	if err := postAll(s.pool, ps); err != nil {
		s.t.Fatal(err)
	}
}

// billStored bills every decision stored so far, as the billing loop does, in chunks of 100.
func billStored(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	last, err := db.LastDecisionSeq(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dbtest.Ledger(t, pool).BillChunk(ctx, 0, last, 100); err != nil {
		t.Fatal(err)
	}
}

func postAll(pool *pgxpool.Pool, ps []db.Posting) error {
	return db.InTx(context.Background(), pool, func(tx pgx.Tx) error {
		for _, p := range ps {
			if _, err := new(db.Ledger).Post(context.Background(), tx, p); err != nil {
				return err
			}
		}
		return nil
	})
}
