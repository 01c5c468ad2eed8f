package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/onceledger/onceledger/internal/config"
)

// The deployment's Stripe mode comes from the key's prefix or STRIPE_LIVEMODE; a contradiction
// refuses to start.
func TestLivemode(t *testing.T) {
	t.Parallel()
	live, test := true, false
	cases := []struct {
		key, setting string
		want         *bool
		wantErr      bool
	}{
		{"sk_live_x", "", &live, false},
		{"rk_live_x", "", &live, false},
		{"sk_test_x", "", &test, false},
		{"rk_test_x", "", &test, false},
		{"", "true", &live, false},
		{"", "false", &test, false},
		{"sk_test_x", "false", &test, false},
		{"", "", nil, false},
		{"sk_other", "", nil, false},
		{"sk_live_x", "false", nil, true},
		{"rk_test_x", "true", nil, true},
		{"", "yes", nil, true},
	}
	for _, c := range cases {
		cfg, err := config.Load(func(k string) string {
			return map[string]string{"STRIPE_SECRET_KEY": c.key, "STRIPE_LIVEMODE": c.setting}[k]
		})
		if (err != nil) != c.wantErr {
			t.Errorf("key %q, STRIPE_LIVEMODE %q: error %v", c.key, c.setting, err)
			continue
		}
		if c.wantErr {
			continue
		}
		if (cfg.Livemode == nil) != (c.want == nil) || (c.want != nil && *cfg.Livemode != *c.want) {
			t.Errorf("key %q, STRIPE_LIVEMODE %q: livemode %v, want %v", c.key, c.setting, cfg.Livemode, c.want)
		}
	}
}

// DB_MAX_CONNS is a positive number; unset, the default applies unless DATABASE_URL names
// pool_max_conns. PPROF_ADDR only listens on loopback.
func TestDBMaxConnsAndPprofAddr(t *testing.T) {
	t.Parallel()
	cases := []struct {
		vars      map[string]string
		wantConns int32
		wantPprof string
		wantErr   bool
	}{
		{map[string]string{}, config.DefaultDBMaxConns, "", false},
		{map[string]string{"DB_MAX_CONNS": "40"}, 40, "", false},
		{map[string]string{"DATABASE_URL": "postgres://h/db?pool_max_conns=3"}, 0, "", false},
		{map[string]string{"DATABASE_URL": "postgres://h/db?pool_max_conns=3", "DB_MAX_CONNS": "7"}, 7, "", false},
		{map[string]string{"DB_MAX_CONNS": "0"}, 0, "", true},
		{map[string]string{"DB_MAX_CONNS": "many"}, 0, "", true},
		{map[string]string{"PPROF_ADDR": "127.0.0.1:6060"}, config.DefaultDBMaxConns, "127.0.0.1:6060", false},
		{map[string]string{"PPROF_ADDR": "localhost:6060"}, config.DefaultDBMaxConns, "localhost:6060", false},
		{map[string]string{"PPROF_ADDR": "[::1]:6060"}, config.DefaultDBMaxConns, "[::1]:6060", false},
		{map[string]string{"PPROF_ADDR": "0.0.0.0:6060"}, 0, "", true},
		{map[string]string{"PPROF_ADDR": ":6060"}, 0, "", true},
		{map[string]string{"PPROF_ADDR": "10.0.0.1:6060"}, 0, "", true},
	}
	for _, c := range cases {
		cfg, err := config.Load(func(k string) string { return c.vars[k] })
		if (err != nil) != c.wantErr {
			t.Errorf("%v: error %v", c.vars, err)
			continue
		}
		if !c.wantErr && (cfg.DBMaxConns != c.wantConns || cfg.PprofAddr != c.wantPprof) {
			t.Errorf("%v: DBMaxConns %d, PprofAddr %q; want %d, %q", c.vars, cfg.DBMaxConns, cfg.PprofAddr, c.wantConns, c.wantPprof)
		}
	}
}

// Webhook group commit is on unless WEBHOOK_GROUP_COMMIT=off; anything else refuses to start.
func TestWebhookGroupCommit(t *testing.T) {
	t.Parallel()
	for setting, want := range map[string]bool{"": true, "on": true, "off": false} {
		cfg, err := config.Load(func(k string) string { return map[string]string{"WEBHOOK_GROUP_COMMIT": setting}[k] })
		if err != nil || cfg.WebhookGroupCommit != want {
			t.Errorf("WEBHOOK_GROUP_COMMIT=%q: %v %v, want %v", setting, cfg.WebhookGroupCommit, err, want)
		}
	}
	for _, setting := range []string{"true", "OFF", "0"} {
		if _, err := config.Load(func(k string) string { return map[string]string{"WEBHOOK_GROUP_COMMIT": setting}[k] }); err == nil {
			t.Errorf("WEBHOOK_GROUP_COMMIT=%q was accepted", setting)
		}
	}
}

// STRIPE_RECONCILE_INTERVAL is a daily drift pass unless set; 0 turns it off; a negative or malformed
// value refuses to start.
func TestStripeReconcileInterval(t *testing.T) {
	t.Parallel()
	cases := []struct {
		setting string
		want    time.Duration
		wantErr bool
	}{
		{"", 24 * time.Hour, false},
		{"6h", 6 * time.Hour, false},
		{"0", 0, false},
		{"-1h", 0, true},
		{"daily", 0, true},
	}
	for _, c := range cases {
		cfg, err := config.Load(func(k string) string {
			return map[string]string{"STRIPE_RECONCILE_INTERVAL": c.setting}[k]
		})
		if (err != nil) != c.wantErr {
			t.Errorf("STRIPE_RECONCILE_INTERVAL %q: error %v", c.setting, err)
			continue
		}
		if !c.wantErr && cfg.StripeReconcileInterval != c.want {
			t.Errorf("STRIPE_RECONCILE_INTERVAL %q: %s, want %s", c.setting, cfg.StripeReconcileInterval, c.want)
		}
	}
}

// Tracing is on only when an OTLP endpoint is named; the other standard variables are checked, so a
// sampler or exporter that cannot be honoured refuses to start.
func TestTracing(t *testing.T) {
	t.Parallel()
	cases := []struct {
		vars    map[string]string
		want    config.Tracing
		wantErr bool
	}{
		{map[string]string{}, config.Tracing{}, false},
		{map[string]string{"OTEL_SERVICE_NAME": "billing"}, config.Tracing{}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
			config.Tracing{Endpoint: "http://collector:4318/v1/traces", ServiceName: "onceledger", ParentBased: true, Ratio: 1}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector/otlp/"},
			config.Tracing{Endpoint: "https://collector/otlp/v1/traces", ServiceName: "onceledger", ParentBased: true, Ratio: 1}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:4318/traces"},
			config.Tracing{Endpoint: "http://b:4318/traces", ServiceName: "onceledger", ParentBased: true, Ratio: 1}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SERVICE_NAME": "billing", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"},
			config.Tracing{Endpoint: "http://c:4318/v1/traces", ServiceName: "billing", Ratio: 0.25}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_SAMPLER": "parentbased_always_off"},
			config.Tracing{Endpoint: "http://c:4318/v1/traces", ServiceName: "onceledger", ParentBased: true}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, config.Tracing{}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, config.Tracing{}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, config.Tracing{}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "jaeger"}, config.Tracing{}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, config.Tracing{}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_SAMPLER": "sometimes"}, config.Tracing{}, true},
		{map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, config.Tracing{}, true},
	}
	for _, c := range cases {
		cfg, err := config.Load(func(k string) string { return c.vars[k] })
		if (err != nil) != c.wantErr {
			t.Errorf("%v: error %v", c.vars, err)
			continue
		}
		if !c.wantErr && cfg.Tracing != c.want {
			t.Errorf("%v: tracing %+v, want %+v", c.vars, cfg.Tracing, c.want)
		}
	}
}

// ONCELEDGER_API_KEYS: named, scoped entries and bare secrets (admin keys named after their first
// characters); a secret shorter than 32 characters, an unknown scope, a malformed entry or a name used
// twice refuses to start.
func TestAPIKeys(t *testing.T) {
	t.Parallel()
	const secret = "0123456789abcdef0123456789abcdef"
	load := func(keys string) (config.Config, error) {
		return config.Load(func(k string) string { return map[string]string{"ONCELEDGER_API_KEYS": keys}[k] })
	}
	cfg, err := load("product:spend:a" + secret + ", finance:read:b" + secret + ",ops:operate+read:c" + secret + "," + secret)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name, scopes string
	}{{"product", "spend"}, {"finance", "read"}, {"ops", "read+operate"}, {"012345", "admin"}}
	if len(cfg.APIKeys) != len(want) {
		t.Fatalf("%d keys, want %d", len(cfg.APIKeys), len(want))
	}
	for i, w := range want {
		if k := cfg.APIKeys[i]; k.Name != w.name || k.Scopes.String() != w.scopes {
			t.Errorf("key %d: %s with %s, want %s with %s", i, k.Name, k.Scopes, w.name, w.scopes)
		}
	}
	if k := cfg.APIKeys.Match("b" + secret); k == nil || k.Name != "finance" {
		t.Errorf("finance's secret matched %v", k)
	}
	if k := cfg.APIKeys.Match(secret + "x"); k != nil {
		t.Errorf("a wrong secret matched %s", k.Name)
	}
	for _, bad := range []string{
		"short_secret",
		"product:spend:short",
		"product:mint:" + secret,
		"product:" + secret,
		"Product:spend:" + secret,
		"product:spend:a" + secret + ",product:read:b" + secret,
	} {
		if _, err := load(bad); err == nil {
			t.Errorf("ONCELEDGER_API_KEYS=%q accepted", bad)
		}
	}
}

// What serve must not run with refuses to start, saying why: a webhook secret shorter than Stripe's, the
// README's public development key or secret on an address other machines reach, and (serve only) no
// API key at all. On loopback the development defaults are fine (make run). The session cookie is
// Secure unless ADDR is loopback or CONSOLE_SECURE_COOKIE says otherwise.
func TestDangerousSettingsAreRefused(t *testing.T) {
	t.Parallel()
	const key = "ops:operate:0123456789abcdef0123456789abcdef"
	load := func(vars map[string]string) (config.Config, error) {
		return config.Load(func(k string) string { return vars[k] })
	}
	for _, bad := range []map[string]string{
		{"STRIPE_WEBHOOK_SECRET": "whsec_", "ONCELEDGER_API_KEYS": key},
		{"STRIPE_WEBHOOK_SECRET": "whsec_0123456789abcdef0123456789abcde", "ONCELEDGER_API_KEYS": key},
		{"ADDR": "0.0.0.0:8080", "ONCELEDGER_API_KEYS": config.DevAPIKey},
		{"ADDR": "10.0.0.5:8080", "ONCELEDGER_API_KEYS": key + ",dev:read:" + config.DevAPIKey},
		{"ADDR": ":8080", "ONCELEDGER_API_KEYS": key, "STRIPE_WEBHOOK_SECRET": config.DevWebhookSecret},
		{"CONSOLE_SECURE_COOKIE": "yes", "ONCELEDGER_API_KEYS": key},
	} {
		if _, err := load(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	dev, err := load(map[string]string{"ADDR": "127.0.0.1:8080", "ONCELEDGER_API_KEYS": config.DevAPIKey,
		"STRIPE_WEBHOOK_SECRET": config.DevWebhookSecret})
	if err != nil || dev.CheckServe() != nil || dev.SecureCookies {
		t.Fatalf("make run's defaults on loopback: %v, %v, secure cookies %t", err, dev.CheckServe(), dev.SecureCookies)
	}
	if none, err := load(map[string]string{}); err != nil || none.CheckServe() == nil {
		t.Fatalf("no keys: load %v, serve let through", err)
	}
	public, err := load(map[string]string{"ADDR": "0.0.0.0:8080", "ONCELEDGER_API_KEYS": key, "ALLOWED_HOSTS": "Ledger.example.com, localhost"})
	if err != nil || !public.SecureCookies || strings.Join(public.AllowedHosts, ",") != "ledger.example.com,localhost" {
		t.Fatalf("a public address: %v, secure cookies %t, allowed hosts %v", err, public.SecureCookies, public.AllowedHosts)
	}
	proxied, err := load(map[string]string{"ONCELEDGER_API_KEYS": key, "CONSOLE_SECURE_COOKIE": "on"})
	if err != nil || !proxied.SecureCookies {
		t.Fatalf("CONSOLE_SECURE_COOKIE=on behind a proxy on loopback: %v, secure cookies %t", err, proxied.SecureCookies)
	}
}

// The journal's general-ledger account names default to the usual ones; each JOURNAL_ACCOUNT_* renames one.
func TestJournalAccounts(t *testing.T) {
	t.Parallel()
	c, err := config.Load(func(name string) string {
		return map[string]string{"ONCELEDGER_API_KEYS": "k_0123456789abcdef0123456789abcdef", "JOURNAL_ACCOUNT_REVENUE": " 4000 Sales "}[name]
	})
	if err != nil {
		t.Fatal(err)
	}
	want := config.JournalAccounts{DeferredRevenue: "Deferred revenue", Revenue: "4000 Sales", Breakage: "Breakage revenue",
		Cash: "Cash", Refunds: "Refunds", Chargebacks: "Chargebacks"}
	if c.Journal != want {
		t.Fatalf("journal accounts %+v, want %+v", c.Journal, want)
	}
}
