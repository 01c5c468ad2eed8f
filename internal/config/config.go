// Package config reads onceledger's configuration (SPEC §8) from environment variables, through an
// injected getenv so that tests and the binary read it the same way.
package config

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onceledger/onceledger/internal/access"
)

// Config is everything the binary can be told.
type Config struct {
	// DatabaseURL is empty when unset: the binary then finds or starts a local server (pglocal).
	DatabaseURL string
	// Addr is the listen address of serve.
	Addr string
	// WebhookSecrets are the Stripe endpoint secrets accepted at once (several during a rotation).
	WebhookSecrets []string
	// StripeSecretKey enables Stripe API calls (refund lists, Checkout Sessions, missed events).
	StripeSecretKey string
	// Livemode is the deployment's Stripe mode: true for live, false for test, nil when neither
	// STRIPE_SECRET_KEY nor STRIPE_LIVEMODE says (then events of both modes are accepted).
	Livemode *bool
	// StripeAPIBase overrides Stripe's API URL (tests, stripe-mock); empty means Stripe itself.
	StripeAPIBase string
	// APIKeys are the named, scoped bearer keys accepted on /v1 and at the console's login; none means
	// /v1 answers 401.
	APIKeys access.Keys
	// SignupGrant is granted once per new account, in minor units; 0 disables it.
	SignupGrant int64
	// NotifyURL receives entry notifications after commit; empty disables them.
	NotifyURL string
	// NotifySecret signs notifications.
	NotifySecret string
	// ReconcileInterval is how often serve runs the reconciler.
	ReconcileInterval time.Duration
	// ReconcileLookback is how far back the reconciler lists Stripe events whose delivery failed.
	ReconcileLookback time.Duration
	// StripeReconcileInterval is how often serve checks that Stripe and the ledger agree (the drift
	// pass, SPEC §20); 0 turns the scheduled pass off.
	StripeReconcileInterval time.Duration
	// PaidCreditTTL is how long a top-up's credit lot lasts; GrantTTL the signup grant's. 0: never expires.
	PaidCreditTTL time.Duration
	GrantTTL      time.Duration
	// DataDir holds the private PostgreSQL cluster when no server answers.
	DataDir string
	// DBMaxConns sizes the server's connection pool; 0 when DATABASE_URL's pool_max_conns decides.
	DBMaxConns int32
	// PprofAddr is the loopback address of the net/http/pprof listener; empty (the default) serves none.
	PprofAddr string
	// WebhookGroupCommit commits concurrent first deliveries of paid Checkout Sessions together
	// (db.CheckoutGrouper); off gives each its own transaction.
	WebhookGroupCommit bool
	// Tracing is where serve sends its OpenTelemetry spans; the zero value sends none.
	Tracing Tracing
	// SecureCookies marks the console's session cookie Secure and sends HSTS: the console is reached
	// over TLS (often through a proxy that terminates it). CONSOLE_SECURE_COOKIE on or off; unset, on
	// unless ADDR is a loopback address (make run, a local port-forward).
	SecureCookies bool
	// AllowedHosts, when set, are the only Host headers (without port) answered: a page of another site
	// whose name was rebound to this server's address is refused (DNS rebinding). ALLOWED_HOSTS,
	// comma-separated; `make run` sets 127.0.0.1 and localhost.
	AllowedHosts []string
	// Journal names the general-ledger accounts of the revenue journal (GET /v1/reports/journal).
	Journal JournalAccounts
}

// JournalAccounts are the general-ledger account names the revenue journal books to, each from its
// JOURNAL_ACCOUNT_* variable (docs/operating.md), defaulting to the name in its comment.
type JournalAccounts struct {
	DeferredRevenue string // JOURNAL_ACCOUNT_DEFERRED_REVENUE, "Deferred revenue": credits sold, not used yet
	Revenue         string // JOURNAL_ACCOUNT_REVENUE, "Revenue": credits used
	Breakage        string // JOURNAL_ACCOUNT_BREAKAGE, "Breakage revenue": credits expired or voided unused
	Cash            string // JOURNAL_ACCOUNT_CASH, "Cash": what customers paid
	Refunds         string // JOURNAL_ACCOUNT_REFUNDS, "Refunds": what was paid back
	Chargebacks     string // JOURNAL_ACCOUNT_CHARGEBACKS, "Chargebacks": what disputes took back
}

// OrDefaults is j with each name left empty set to its default.
func (j JournalAccounts) OrDefaults() JournalAccounts {
	return JournalAccounts{
		DeferredRevenue: or(j.DeferredRevenue, "Deferred revenue"),
		Revenue:         or(j.Revenue, "Revenue"),
		Breakage:        or(j.Breakage, "Breakage revenue"),
		Cash:            or(j.Cash, "Cash"),
		Refunds:         or(j.Refunds, "Refunds"),
		Chargebacks:     or(j.Chargebacks, "Chargebacks"),
	}
}

// Tracing is read from OpenTelemetry's standard variables, the subset an OTLP/HTTP exporter of
// traces needs. Endpoint empty is off: no exporter, no tracer provider.
type Tracing struct {
	// Endpoint is the URL spans are posted to: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, else
	// OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces appended.
	Endpoint string
	// ServiceName is OTEL_SERVICE_NAME, "onceledger" by default.
	ServiceName string
	// ParentBased and Ratio are OTEL_TRACES_SAMPLER and its argument: a trace is sampled with
	// probability Ratio (1: always, 0: never), unless ParentBased and the caller's traceparent decided.
	ParentBased bool
	Ratio       float64
}

// DefaultDBMaxConns is the pool size when neither DB_MAX_CONNS nor DATABASE_URL's pool_max_conns says:
// enough connections for the webhook's concurrent deliveries (each one transaction) to commit
// together, where pgxpool's default (four here, the number of CPUs otherwise) queued them in the pool.
// docs/performance.md has the measurement.
const DefaultDBMaxConns = 16

// The development defaults `make run` sets and the README prints: public, so refused on any address
// but loopback (CheckServe).
const (
	DevAPIKey        = "onceledger_dev_key_local_only_not_secret"
	DevWebhookSecret = "whsec_dev_onceledger_local_only_not_a_secret"
)

// minWebhookSecret is the length of Stripe's endpoint secrets (whsec_ and 32 characters): a shorter
// one was not made by Stripe, and is easier to guess.
const minWebhookSecret = len("whsec_") + 32

// Load reads the configuration. Every value is checked here, so a typo fails at start, not later.
func Load(getenv func(string) string) (Config, error) {
	c := Config{
		DatabaseURL:     getenv("DATABASE_URL"),
		Addr:            or(getenv("ADDR"), "127.0.0.1:8080"),
		WebhookSecrets:  list(getenv("STRIPE_WEBHOOK_SECRET")),
		StripeSecretKey: strings.TrimSpace(getenv("STRIPE_SECRET_KEY")),
		StripeAPIBase:   strings.TrimRight(strings.TrimSpace(getenv("STRIPE_API_BASE")), "/"),
		NotifyURL:       strings.TrimSpace(getenv("NOTIFY_URL")),
		NotifySecret:    getenv("NOTIFY_SECRET"),
		DataDir:         or(getenv("ONCELEDGER_DATA_DIR"), ".data"),
		AllowedHosts:    list(strings.ToLower(getenv("ALLOWED_HOSTS"))),
		Journal: JournalAccounts{
			DeferredRevenue: strings.TrimSpace(getenv("JOURNAL_ACCOUNT_DEFERRED_REVENUE")),
			Revenue:         strings.TrimSpace(getenv("JOURNAL_ACCOUNT_REVENUE")),
			Breakage:        strings.TrimSpace(getenv("JOURNAL_ACCOUNT_BREAKAGE")),
			Cash:            strings.TrimSpace(getenv("JOURNAL_ACCOUNT_CASH")),
			Refunds:         strings.TrimSpace(getenv("JOURNAL_ACCOUNT_REFUNDS")),
			Chargebacks:     strings.TrimSpace(getenv("JOURNAL_ACCOUNT_CHARGEBACKS")),
		}.OrDefaults(),
	}
	var errs []error
	var err error
	if c.APIKeys, err = access.Parse(list(getenv("ONCELEDGER_API_KEYS"))); err != nil {
		errs = append(errs, err)
	}
	if c.SignupGrant, err = strconv.ParseInt(or(getenv("SIGNUP_GRANT"), "0"), 10, 64); err != nil || c.SignupGrant < 0 {
		errs = append(errs, fmt.Errorf("SIGNUP_GRANT must be a whole number of minor units ≥ 0, got %q", getenv("SIGNUP_GRANT")))
	}
	if c.ReconcileInterval, err = time.ParseDuration(or(getenv("RECONCILE_INTERVAL"), "30s")); err != nil || c.ReconcileInterval <= 0 {
		errs = append(errs, fmt.Errorf("RECONCILE_INTERVAL must be a positive duration such as 30s, got %q", getenv("RECONCILE_INTERVAL")))
	}
	if c.ReconcileLookback, err = time.ParseDuration(or(getenv("RECONCILE_LOOKBACK"), "72h")); err != nil || c.ReconcileLookback <= 0 || c.ReconcileLookback > 30*24*time.Hour {
		errs = append(errs, fmt.Errorf("RECONCILE_LOOKBACK must be a positive duration up to 720h (Stripe keeps events 30 days), got %q", getenv("RECONCILE_LOOKBACK")))
	}
	if c.StripeReconcileInterval, err = time.ParseDuration(or(getenv("STRIPE_RECONCILE_INTERVAL"), "24h")); err != nil || c.StripeReconcileInterval < 0 {
		errs = append(errs, fmt.Errorf("STRIPE_RECONCILE_INTERVAL must be a duration such as 24h, or 0 (off), got %q", getenv("STRIPE_RECONCILE_INTERVAL")))
	}
	if c.DBMaxConns, err = dbMaxConns(getenv("DB_MAX_CONNS"), c.DatabaseURL); err != nil {
		errs = append(errs, err)
	}
	if c.PprofAddr, err = loopback(getenv("PPROF_ADDR")); err != nil {
		errs = append(errs, err)
	}
	switch getenv("WEBHOOK_GROUP_COMMIT") {
	case "", "on":
		c.WebhookGroupCommit = true
	case "off":
	default:
		errs = append(errs, fmt.Errorf("WEBHOOK_GROUP_COMMIT must be on or off, got %q", getenv("WEBHOOK_GROUP_COMMIT")))
	}
	switch getenv("CONSOLE_SECURE_COOKIE") {
	case "":
		c.SecureCookies = !isLoopback(c.Addr)
	case "on":
		c.SecureCookies = true
	case "off":
	default:
		errs = append(errs, fmt.Errorf("CONSOLE_SECURE_COOKIE must be on or off, got %q", getenv("CONSOLE_SECURE_COOKIE")))
	}
	if c.Tracing, err = tracing(getenv); err != nil {
		errs = append(errs, err)
	}
	for name, ttl := range map[string]*time.Duration{"PAID_CREDIT_TTL": &c.PaidCreditTTL, "GRANT_TTL": &c.GrantTTL} {
		raw := getenv(name)
		if raw == "" {
			continue
		}
		if *ttl, err = time.ParseDuration(raw); err != nil || *ttl <= 0 {
			errs = append(errs, fmt.Errorf("%s must be a positive duration such as 8760h, or unset (never expires), got %q", name, raw))
		}
	}
	if c.Livemode, err = livemode(c.StripeSecretKey, getenv("STRIPE_LIVEMODE")); err != nil {
		errs = append(errs, err)
	}
	for _, s := range c.WebhookSecrets {
		if !strings.HasPrefix(s, "whsec_") || len(s) < minWebhookSecret {
			errs = append(errs, fmt.Errorf("STRIPE_WEBHOOK_SECRET: every secret is Stripe's endpoint secret, whsec_ and at least %d more characters (the dashboard's, or `stripe listen`'s)", minWebhookSecret-len("whsec_")))
			break
		}
	}
	if !isLoopback(c.Addr) && (c.APIKeys.Match(DevAPIKey) != nil || slices.Contains(c.WebhookSecrets, DevWebhookSecret)) {
		errs = append(errs, fmt.Errorf("ADDR %s is reachable from other machines, and ONCELEDGER_API_KEYS or STRIPE_WEBHOOK_SECRET holds the public development one the README prints: set your own", c.Addr))
	}
	for name, raw := range map[string]string{"STRIPE_API_BASE": c.StripeAPIBase, "NOTIFY_URL": c.NotifyURL} {
		if raw == "" {
			continue
		}
		if u, err := url.Parse(raw); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("%s must be an http(s) URL, got %q", name, raw))
		}
	}
	if c.NotifyURL != "" && c.NotifySecret == "" {
		errs = append(errs, errors.New("NOTIFY_SECRET is required with NOTIFY_URL: receivers verify the signature"))
	}
	return c, errors.Join(errs...)
}

// CheckServe refuses what serve must not start with, though other commands may: no API key at all
// (every /v1 request and every console login would be refused).
func (c Config) CheckServe() error {
	if len(c.APIKeys) == 0 {
		return errors.New("ONCELEDGER_API_KEYS is empty: set at least one key (docs/access.md says how), or every /v1 request and console login is refused")
	}
	return nil
}

// livemode is the deployment's mode: what the key's prefix says (sk_live_/rk_live_, sk_test_/rk_test_)
// and STRIPE_LIVEMODE, which must not contradict it; nil when neither says.
func livemode(secretKey, setting string) (*bool, error) {
	var fromKey, fromSetting *bool
	switch {
	case strings.HasPrefix(secretKey, "sk_live_"), strings.HasPrefix(secretKey, "rk_live_"):
		fromKey = ptr(true)
	case strings.HasPrefix(secretKey, "sk_test_"), strings.HasPrefix(secretKey, "rk_test_"):
		fromKey = ptr(false)
	}
	switch strings.TrimSpace(setting) {
	case "":
	case "true":
		fromSetting = ptr(true)
	case "false":
		fromSetting = ptr(false)
	default:
		return nil, fmt.Errorf("STRIPE_LIVEMODE must be true or false, got %q", setting)
	}
	if fromKey != nil && fromSetting != nil && *fromKey != *fromSetting {
		return nil, fmt.Errorf("STRIPE_LIVEMODE=%t contradicts STRIPE_SECRET_KEY, a %s key", *fromSetting, map[bool]string{true: "live", false: "test"}[*fromKey])
	}
	return cmp.Or(fromKey, fromSetting), nil
}

// dbMaxConns is DB_MAX_CONNS; unset, it is DefaultDBMaxConns, or 0 when the URL names pool_max_conns
// itself (pgxpool reads it; an explicit DB_MAX_CONNS wins over it).
func dbMaxConns(setting, databaseURL string) (int32, error) {
	setting = strings.TrimSpace(setting)
	if setting == "" {
		if strings.Contains(databaseURL, "pool_max_conns=") {
			return 0, nil
		}
		return DefaultDBMaxConns, nil
	}
	n, err := strconv.ParseInt(setting, 10, 32)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("DB_MAX_CONNS must be a whole number of connections ≥ 1, got %q", setting)
	}
	return int32(n), nil
}

// loopback checks PPROF_ADDR: a host:port whose host is a loopback address (or localhost), since
// profiles show the process's internals to whoever can reach them. Empty stays empty.
func loopback(addr string) (string, error) {
	addr = strings.TrimSpace(addr)
	if addr == "" {
		return "", nil
	}
	if !isLoopback(addr) {
		return "", fmt.Errorf("PPROF_ADDR must be a loopback host:port such as 127.0.0.1:6060, got %q", addr)
	}
	return addr, nil
}

// isLoopback reports whether addr is a host:port whose host is a loopback address or localhost.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	return err == nil && (host == "localhost" || (ip != nil && ip.IsLoopback()))
}

// tracing reads OpenTelemetry's variables: tracing is on when an OTLP endpoint is named, unless
// OTEL_SDK_DISABLED or OTEL_TRACES_EXPORTER=none turns it off. Only OTLP over HTTP (protobuf) is built in,
// so another exporter or protocol refuses to start rather than send nothing.
func tracing(getenv func(string) string) (Tracing, error) {
	var errs []error
	switch exporter := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exporter {
	case "", "otlp":
	case "none":
		return Tracing{}, nil
	default:
		errs = append(errs, fmt.Errorf("OTEL_TRACES_EXPORTER must be otlp or none, got %q", exporter))
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(name)); p != "" && p != "http/protobuf" {
			errs = append(errs, fmt.Errorf("%s must be http/protobuf (the exporter built in), got %q", name, p))
		}
	}
	t := Tracing{ServiceName: or(getenv("OTEL_SERVICE_NAME"), "onceledger"), Ratio: 1}
	name, endpoint := "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
	if endpoint == "" {
		name, endpoint = "OTEL_EXPORTER_OTLP_ENDPOINT", strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
		if endpoint != "" {
			endpoint = strings.TrimRight(endpoint, "/") + "/v1/traces"
		}
	}
	if u, err := url.Parse(endpoint); endpoint != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		errs = append(errs, fmt.Errorf("%s must be an http(s) URL, got %q", name, getenv(name)))
	}
	sampler := or(getenv("OTEL_TRACES_SAMPLER"), "parentbased_always_on")
	t.ParentBased = strings.HasPrefix(sampler, "parentbased_")
	switch strings.TrimPrefix(sampler, "parentbased_") {
	case "always_on":
	case "always_off":
		t.Ratio = 0
	case "traceidratio":
		arg := or(getenv("OTEL_TRACES_SAMPLER_ARG"), "1")
		ratio, err := strconv.ParseFloat(arg, 64)
		if err != nil || ratio < 0 || ratio > 1 {
			errs = append(errs, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG must be a ratio from 0 to 1, got %q", arg))
		}
		t.Ratio = ratio
	default:
		errs = append(errs, fmt.Errorf("OTEL_TRACES_SAMPLER must be always_on, always_off, traceidratio or their parentbased_ forms, got %q", sampler))
	}
	if err := errors.Join(errs...); err != nil || endpoint == "" || strings.TrimSpace(getenv("OTEL_SDK_DISABLED")) == "true" {
		return Tracing{}, err
	}
	t.Endpoint = endpoint
	return t, nil
}

func ptr[T any](v T) *T { return &v }

// or is v without surrounding blanks, or fallback when that is empty.
func or(v, fallback string) string {
	return cmp.Or(strings.TrimSpace(v), fallback)
}

// list splits a comma-separated value, dropping blanks.
func list(v string) []string {
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
