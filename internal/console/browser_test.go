package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/onceledger/onceledger/api"
	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/access"
	"github.com/onceledger/onceledger/internal/config"
	"github.com/onceledger/onceledger/internal/stripeevents"
)

const (
	apiKey        = "console_test_key_onceledger_00000"
	webhookSecret = "whsec_console_test"
	// opsKey is an operator's key (named ops, scope operate).
	opsKey = "ops_key_onceledger_console_tests_0000"
	// spendKey and readKey are keys of the product and of finance: the console refuses them.
	spendKey = "console_spend_key_onceledger_0000"
	readKey  = "console_read_key_onceledger_00000"
)

// testKeys are the keys every console test server accepts: an admin key (apiKey), an operator's, the
// product's and finance's.
func testKeys(t testing.TB) access.Keys {
	t.Helper()
	keys, err := access.Parse([]string{"ops:operate:" + opsKey, apiKey,
		"product:spend:" + spendKey, "finance:read:" + readKey})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// The console in a real browser (headless Chromium), against the real router on a fresh database: a
// wrong key cannot log in; the right one can; a parked top-up is found, dry-run once its account
// exists (the diff shows its credit and the ledger is unchanged), then replayed (the balance moves
// once; a second click moves nothing); a POST without its CSRF token, or with another one, is refused
// and changes nothing. The account page shows held and available, the open lots in draw order, the
// holds soonest to expire first and the recharge and alert settings; the overview, the holds expiring
// within the hour. With CONSOLE_SCREENSHOTS=1 it also writes docs/console/*.png.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	s := newConsoleServer(t)
	b := newBrowser(t)

	// A top-up for an account the product has not created yet parks; so does a refund of a payment
	// never seen. Both through the real webhook.
	s.deliver(topupEvent("evt_console_topup", "cs_console", "pi_console", "acct_console", 2500))
	s.deliver(refundEvent("evt_console_refund", "re_console", "pi_unknown", 400))
	// Decisions for an account that does not exist wait for it; those of an existing account wait for
	// the reconciler (which this server does not run).
	s.call(http.MethodPost, "/v1/decisions", `[{"id":"dec_a1","account_id":"acct_awaited","cost":10},`+
		`{"id":"dec_a2","account_id":"acct_awaited","cost":20},{"id":"dec_a3","account_id":"acct_awaited","cost":30}]`, "")
	s.call(http.MethodPut, "/v1/accounts/acct_busy", `{"currency":"gbp"}`, "")
	s.call(http.MethodPost, "/v1/decisions", `[{"id":"dec_b1","account_id":"acct_busy","cost":5},{"id":"dec_b2","account_id":"acct_busy","cost":5}]`, "")

	// Any console page sends a visitor without a session to the login form.
	b.run(chromedp.Navigate(s.url+"/console/"), chromedp.WaitVisible(chromedp.CSS("#key")))
	b.screenshot("login")

	// A wrong key cannot log in.
	b.run(chromedp.SendKeys(chromedp.CSS("#key"), "not_the_key"))
	b.follow(chromedp.Submit(chromedp.CSS("#key")), "#login-error")
	b.run(chromedp.Navigate(s.url+"/console/events"), chromedp.WaitVisible(chromedp.CSS("#key")))

	// The right key does: the overview counts both parked events.
	b.run(chromedp.SendKeys(chromedp.CSS("#key"), apiKey))
	b.follow(chromedp.Submit(chromedp.CSS("#key")), "#parked-by-reason")
	if got := b.text("#parked-total"); got != "2" {
		t.Fatalf("overview shows %q parked events, want 2", got)
	}
	if got := b.text("#waiting tbody"); !strings.HasPrefix(got, "acct_awaited\t3\t") {
		t.Fatalf("overview shows decisions waiting as %q, want 3 for acct_awaited", got)
	}
	if got := b.text("#billing-lag"); !strings.HasPrefix(got, "2 of the latest 10,000 decisions are not billed yet") {
		t.Fatalf("overview shows billing lag as %q, want 2 unbilled", got)
	}

	// The parked list leads to the event.
	b.follow(chromedp.Click(chromedp.CSS(`a[href="/console/events?outcome=parked"]`)),
		`#events a[href="/console/events/evt_console_topup"]`)
	b.screenshot("events")
	b.follow(chromedp.Click(chromedp.CSS(`#events a[href="/console/events/evt_console_topup"]`)), "#payload")
	if got := b.text("#reason"); got != "unknown_account" {
		t.Fatalf("the event is parked as %q, want unknown_account", got)
	}

	// The operator creates the account (with some history), then dry-runs the event.
	s.call(http.MethodPut, "/v1/accounts/acct_console", `{"currency":"gbp"}`, "")
	// Its goodwill credit is a promotional lot drawn after the paid one the top-up will make (priority
	// 90 against 50), although made first.
	s.call(http.MethodPost, "/v1/accounts/acct_console/adjustments", `{"amount":1000,"description":"goodwill credit","priority":90}`, "adj-1")
	s.call(http.MethodPost, "/v1/accounts/acct_console/adjustments", `{"amount":-300,"description":"correction"}`, "adj-2")
	s.wantMoney("acct_console", 700, 2)

	b.follow(chromedp.Click(chromedp.CSS("#dry-run-button")), "#dry-run-entries")
	if got := b.text("#dry-run-entries tbody"); !strings.Contains(got, "acct_console\ttopup\t+2,500\t3,200\tstripe:evt_console_topup") {
		t.Fatalf("the dry run shows\n%s\nwant the top-up of +2,500 under stripe:evt_console_topup, balance after 3,200", got)
	}
	if n := b.count("#dry-run-entries tbody tr"); n != 1 {
		t.Fatalf("the dry run shows %d entries, want 1", n)
	}
	s.wantMoney("acct_console", 700, 2)
	s.wantOutcome("evt_console_topup", "parked")
	b.screenshot("event")

	// A replay whose form lost its CSRF token, or carries another session's, is refused; nothing moves.
	for _, tamper := range []chromedp.Action[chromedp.Void]{
		chromedp.RemoveAttribute(chromedp.CSS(`form[action$="/replay"] input[name=csrf_token]`), "name"),
		chromedp.SetValue(chromedp.CSS(`form[action$="/replay"] input[name=csrf_token]`), "c2Vzc2lvbi1vZi1zb21lYm9keS1lbHNl"),
	} {
		b.run(
			chromedp.Navigate(s.url+"/console/events/evt_console_topup"),
			chromedp.WaitVisible(chromedp.CSS("#replay-button")),
			tamper,
		)
		b.follow(chromedp.Click(chromedp.CSS("#replay-button")), "#page-error")
		if title := b.title(); !strings.HasPrefix(title, "Forbidden") {
			t.Fatalf("a replay without its CSRF token answered %q, want Forbidden", title)
		}
		s.wantMoney("acct_console", 700, 2)
		s.wantOutcome("evt_console_topup", "parked")
	}

	// Replay: the credit is posted once; a second click posts nothing.
	for range 2 {
		b.run(chromedp.Navigate(s.url + "/console/events/evt_console_topup"))
		b.follow(chromedp.Click(chromedp.CSS("#replay-button")), "#done")
		if got := b.text("#outcome"); got != "applied" {
			t.Fatalf("after the replay the event is %q, want applied", got)
		}
		s.wantMoney("acct_console", 3200, 3)
	}
	b.follow(chromedp.Click(chromedp.CSS("#dry-run-button")), "#dry-run-nothing")
	s.wantMoney("acct_console", 3200, 3)

	// The account holds two reservations, one expiring within the hour, counted under a daily spend
	// limit, and has a low-balance alert and auto-recharge on a saved card.
	s.call(http.MethodPut, "/v1/accounts/acct_console/limits/daily", `{"scope":"account","period":"day","amount":1000,"mode":"hard"}`, "")
	s.call(http.MethodPost, "/v1/accounts/acct_console/holds", `{"id":"hold_later","amount":100,"expires_in":"2h"}`, "")
	s.call(http.MethodPost, "/v1/accounts/acct_console/holds", `{"id":"hold_soon","amount":400,"expires_in":"30m"}`, "")
	s.call(http.MethodPut, "/v1/accounts/acct_console/alerts", `{"low_balance":1000}`, "")
	s.saveCard("acct_console", "cus_console", "pm_console")
	s.call(http.MethodPut, "/v1/accounts/acct_console/recharge", `{"enabled":true,"threshold":500,"amount":2000}`, "")

	// The account page: balance, held and available; the open lots in draw order; the holds soonest to
	// expire first; the settings; every entry with the balance after it; the chart.
	b.follow(chromedp.Click(chromedp.CSS(`#entries a[href="/console/accounts/acct_console"]`)), "#balance-chart")
	for sel, want := range map[string]string{"#balance": "3,200", "#held": "500", "#available": "2,700"} {
		if got := b.text(sel); got != want {
			t.Fatalf("the account page shows %s %q, want %s", sel, got, want)
		}
	}
	if n := b.count("#lots tbody tr"); n != 2 {
		t.Fatalf("the account page lists %d open lots, want 2", n)
	}
	if got := b.text("#lots tbody tr:first-child"); !strings.Contains(got, "paid\t50\t2,500\t2,500\tnever") {
		t.Fatalf("the first lot drawn reads %q, want the top-up's paid lot, priority 50, 2,500 of 2,500 left", got)
	}
	if got := b.text("#lots tbody tr:last-child"); !strings.Contains(got, "promotional\t90\t1,000\t700\tnever") {
		t.Fatalf("the last lot drawn reads %q, want the goodwill credit, priority 90, 700 of 1,000 left", got)
	}
	if n := b.count("#holds tbody tr"); n != 2 {
		t.Fatalf("the account page lists %d holds, want 2", n)
	}
	if got := b.text("#holds tbody tr:first-child"); !strings.HasPrefix(got, "hold_soon\t400\t") {
		t.Fatalf("the hold expiring first reads %q, want hold_soon of 400", got)
	}
	if got := b.text("#holds tbody tr:last-child"); !strings.HasPrefix(got, "hold_later\t100\t") {
		t.Fatalf("the hold expiring last reads %q, want hold_later of 100", got)
	}
	if got := b.text("#limits tbody tr"); !strings.HasPrefix(got, "daily\taccount\thard\tday from ") || !strings.HasSuffix(got, "\t1,000\t0\t500\t0\t500") {
		t.Fatalf("the spend limit reads %q, want daily, 500 of its 1,000 held, 500 left", got)
	}
	if got := b.text("#recharge"); got != "on: below 500 available, buys 2,000" {
		t.Fatalf("the account page shows auto-recharge as %q", got)
	}
	if got := b.text("#recharge-status"); got != "ready" {
		t.Fatalf("the account page shows the recharge status as %q", got)
	}
	if got := b.text("#low-balance-alert"); got != "below 1,000 available" {
		t.Fatalf("the account page shows the low-balance alert as %q", got)
	}
	if got := b.text("#timeline tbody tr:first-child"); !strings.Contains(got, "topup\t+2,500\t3,200\tstripe:evt_console_topup") {
		t.Fatalf("the newest entry reads %q, want the top-up with balance after 3,200", got)
	}
	if got := b.text("#timeline tbody tr:last-child"); !strings.Contains(got, "adjustment\t+1,000\t1,000") {
		t.Fatalf("the oldest entry reads %q, want the +1,000 adjustment with balance after 1,000", got)
	}
	if n := b.count("#balance-chart circle"); n != 3 {
		t.Fatalf("the chart marks %d entries, want 3", n)
	}
	b.screenshot("account")

	// The overview now lists the hold expiring within the hour, and only it; the refund is still parked.
	b.run(chromedp.Navigate(s.url+"/console/"), chromedp.WaitVisible(chromedp.CSS("#expiring-holds")))
	if got := b.text("#expiring-total"); got != "1" {
		t.Fatalf("overview shows %q holds expiring, want 1", got)
	}
	if got := b.text("#expiring-holds tbody"); !strings.HasPrefix(got, "acct_console\thold_soon\t400\t") {
		t.Fatalf("overview lists the holds expiring as %q, want hold_soon of acct_console", got)
	}
	if got := b.text("#parked-total"); got != "1" {
		t.Fatalf("overview shows %q parked events after the replay, want 1", got)
	}
	b.screenshot("overview")

	// Search finds a payment's entries and parked events.
	b.run(chromedp.SetValue(chromedp.CSS(`.bar input[name=q]`), "pi_unknown"))
	b.follow(chromedp.Submit(chromedp.CSS(`.bar input[name=q]`)), `a[href="/console/events/evt_console_refund"]`)

	// Logging out ends the session in this browser.
	b.follow(chromedp.Click(chromedp.CSS(".logout button")), "#key")
	b.run(chromedp.Navigate(s.url+"/console/"), chromedp.WaitVisible(chromedp.CSS("#key")))
}

// consoleServer is the real router on a fresh database, over HTTP.
type consoleServer struct {
	t    *testing.T
	url  string
	pool *db.Pool
	// logFile holds what the server logged.
	logFile string
}

func newConsoleServer(t *testing.T) *consoleServer {
	t.Helper()
	return newConsoleServerOn(t, dbtest.New(t), config.Config{})
}

// newConsoleServerOn is newConsoleServer on the database of pool (a replica of another server on it),
// with cfg's SecureCookies.
func newConsoleServerOn(t *testing.T, pool *db.Pool, base config.Config) *consoleServer {
	t.Helper()
	cfg := config.Config{APIKeys: testKeys(t), WebhookSecrets: []string{webhookSecret}, SecureCookies: base.SecureCookies}
	// A file: concurrent requests may write to it at once.
	logFile := filepath.Join(t.TempDir(), "console.log")
	logs, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logs.Close() })
	log := slog.New(slog.NewTextHandler(logs, nil))
	// Wired as the binary wires it: one Ledger, event processor (no Stripe key here) and River client
	// (which only enqueues and lists here).
	jobs, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ledger := dbtest.Ledger(t, pool)
	srv := httptest.NewServer(api.NewHandler(api.Deps{
		Pool: pool, Log: log, Config: cfg, Ledger: ledger,
		Events: &stripeevents.Processor{Pool: pool, Ledger: ledger, Log: log, Reapply: stripeevents.NewReapplier(jobs)},
		Jobs:   jobs,
	}))
	t.Cleanup(srv.Close)
	return &consoleServer{t: t, url: srv.URL, pool: pool, logFile: logFile}
}

// deliver signs body as Stripe does and posts it to the webhook.
func (s *consoleServer) deliver(body []byte) {
	s.t.Helper()
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: webhookSecret, Timestamp: time.Now()})
	req, err := http.NewRequest(http.MethodPost, s.url+"/webhooks/stripe", bytes.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Stripe-Signature", signed.Header)
	s.do(req, http.StatusOK)
}

// call sends an API request with the API key (and an Idempotency-Key when given).
func (s *consoleServer) call(method, path, body, idempotencyKey string) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	s.do(req, 0)
}

// do sends req and fails unless it answers want (any 2xx when 0).
func (s *consoleServer) do(req *http.Request, want int) {
	s.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if (want != 0 && resp.StatusCode != want) || resp.StatusCode >= 300 {
		s.t.Fatalf("%s %s answered %d: %s", req.Method, req.URL.Path, resp.StatusCode, body)
	}
}

// wantMoney fails unless the account has this balance and this many entries.
func (s *consoleServer) wantMoney(account string, balance int64, entries int) {
	s.t.Helper()
	acct, err := db.GetAccount(context.Background(), s.pool, account)
	if err != nil {
		s.t.Fatal(err)
	}
	list, err := db.Entries(context.Background(), s.pool, account, 0, 1000)
	if err != nil {
		s.t.Fatal(err)
	}
	if acct.Balance != balance || len(list) != entries {
		s.t.Fatalf("%s: balance %d with %d entries, want %d with %d", account, acct.Balance, len(list), balance, entries)
	}
}

// saveCard records a Stripe customer and a card saved for off-session use, as the setup webhook would.
func (s *consoleServer) saveCard(account, customer, paymentMethod string) {
	s.t.Helper()
	ctx := context.Background()
	if err := db.SetStripeCustomer(ctx, s.pool, account, customer); err != nil {
		s.t.Fatal(err)
	}
	if saved, err := db.SetPaymentMethod(ctx, s.pool, account, customer, paymentMethod); err != nil || !saved {
		s.t.Fatalf("save card of %s: saved %v, %v", account, saved, err)
	}
}

func (s *consoleServer) event(eventID string) db.Event {
	s.t.Helper()
	ev, err := db.GetEvent(context.Background(), s.pool, eventID)
	if err != nil {
		s.t.Fatal(err)
	}
	return ev
}

func (s *consoleServer) wantOutcome(eventID, outcome string) {
	s.t.Helper()
	if ev := s.event(eventID); ev.Outcome != outcome {
		s.t.Fatalf("%s is %s, want %s", eventID, ev.Outcome, outcome)
	}
}

// browser is one headless Chromium tab.
type browser struct {
	t   *testing.T
	ctx context.Context
	// shots is where screenshots go; empty unless CONSOLE_SCREENSHOTS=1.
	shots string
}

// newBrowser starts Debian's chromium, headless, on a fresh profile. Without chromium the test fails:
// `make test` installs it first (make chromium).
func newBrowser(t *testing.T) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed, and the console's browser test never skips: run `make chromium` "+
			"(as root it runs apt-get install -y chromium): %v", err)
	}
	profile, err := os.MkdirTemp("", "onceledger-console-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(profile) }) // runs last, after the browser is gone
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 900),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium's sandbox refuses to run as root
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	tab, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(cancelTab)
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("start chromium (%s): %v", path, err)
	}
	b := &browser{t: t, ctx: tab}
	if os.Getenv("CONSOLE_SCREENSHOTS") == "1" {
		b.shots = filepath.Join("..", "..", "docs", "console")
		if err := os.MkdirAll(b.shots, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func (b *browser) run(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		url, _ := chromedp.Run(b.ctx, chromedp.Location())
		b.t.Fatalf("browser at %s: %v", url, err)
	}
}

// follow runs a step that leaves the page (a link's click, a form's submit), waits until the page it
// leads to has loaded, then until sel shows on it. A step run before the load ends can query nodes of
// a document the browser is replacing ("No node with given id found").
func (b *browser) follow(step chromedp.Action[chromedp.Void], sel string) {
	b.t.Helper()
	if _, err := chromedp.RunResponse(b.ctx, step); err != nil {
		url, _ := chromedp.Run(b.ctx, chromedp.Location())
		b.t.Fatalf("browser at %s: %v", url, err)
	}
	b.run(chromedp.WaitVisible(chromedp.CSS(sel)))
}

// get runs one action that answers a value.
func get[T any](b *browser, action chromedp.Action[T]) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, action)
	if err != nil {
		url, _ := chromedp.Run(b.ctx, chromedp.Location())
		b.t.Fatalf("browser at %s: %v", url, err)
	}
	return v
}

// text is the visible text of the first element matching sel (table cells tab-separated).
func (b *browser) text(sel string) string {
	b.t.Helper()
	return strings.TrimSpace(get(b, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible)))
}

func (b *browser) count(sel string) int {
	b.t.Helper()
	return get(b, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%s).length", jsString(sel))))
}

func (b *browser) title() string {
	b.t.Helper()
	return get(b, chromedp.Title())
}

// screenshot writes the whole page to docs/console/NAME.png when screenshots were asked for.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	if b.shots == "" {
		return
	}
	png := get(b, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

func jsString(s string) string {
	out, _ := json.Marshal(s)
	return string(out)
}

// Stripe payloads: real field names and shapes, only what matters.

type obj = map[string]any

func eventJSON(id, eventType string, object obj) []byte {
	body, err := json.Marshal(obj{
		"id": id, "object": "event", "api_version": "2024-06-20", "created": time.Now().Unix(),
		"livemode": false, "pending_webhooks": 1, "type": eventType, "data": obj{"object": object},
	})
	if err != nil {
		panic(err)
	}
	return body
}

func topupEvent(eventID, sessionID, paymentIntent, account string, amount int64) []byte {
	return eventJSON(eventID, "checkout.session.completed", obj{
		"id": sessionID, "object": "checkout.session", "mode": "payment", "status": "complete",
		"payment_status": "paid", "amount_total": amount, "currency": "gbp",
		"metadata": obj{"account_id": account}, "payment_intent": paymentIntent,
	})
}

func refundEvent(eventID, refundID, paymentIntent string, amount int64) []byte {
	return eventJSON(eventID, "refund.created", obj{
		"id": refundID, "object": "refund", "amount": amount, "currency": "gbp", "status": "succeeded",
		"charge": "ch_" + paymentIntent, "payment_intent": paymentIntent, "metadata": obj{},
	})
}
