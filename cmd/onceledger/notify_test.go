package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/notify"
)

// A posting committed while serve is down is delivered, signed, once serve starts with NOTIFY_URL.
func TestServeDeliversNotificationsCommittedWhileDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	url := pool.Config().ConnString()
	const secret = "serve_notify_secret"

	type received struct{ key, signature, body string }
	got := make(chan received, 10)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- received{r.Header.Get("Idempotency-Key"), r.Header.Get(notify.SignatureHeader), string(body)}
	}))
	t.Cleanup(recv.Close)

	// No worker runs yet: the notification is only enqueued, with the entry.
	jobs, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	enqueuer := notify.NewNotifier(jobs, notify.Config{URL: recv.URL, Secret: secret})
	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_serve_notify", "usd", 0); err != nil {
		t.Fatal(err)
	}
	var posted db.Posted
	err = db.InTx(ctx, pool, func(tx pgx.Tx) error {
		posted, err = dbtest.Ledger(t, pool, db.LedgerConfig{OnPosted: enqueuer.Enqueue}).Post(ctx, tx, db.Posting{
			AccountID: "acct_serve_notify", Kind: db.KindTopup, Amount: 1200, DedupeKey: "stripe:evt_serve_notify",
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	startServe(t, map[string]string{"DATABASE_URL": url, "NOTIFY_URL": recv.URL, "NOTIFY_SECRET": secret})
	select {
	case r := <-got:
		if want := notify.NotificationID(posted.Entry.ID); r.key != want {
			t.Fatalf("Idempotency-Key = %q, want %q", r.key, want)
		}
		if err := notify.Verify(secret, r.signature, []byte(r.body), time.Now(), time.Minute); err != nil {
			t.Fatalf("signature: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve never delivered the notification")
	}
}

// serve with NOTIFY_URL refuses to start on a database whose job queue tables are missing, instead
// of accepting postings whose notifications could not be enqueued.
func TestServeWithNotificationsNeedsRiversTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	url := pool.Config().ConnString()
	rm, err := db.NewRiverMigrator(pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rm.Migrate(ctx, rivermigrate.DirectionDown, &rivermigrate.MigrateOpts{TargetVersion: -1}); err != nil {
		t.Fatal(err)
	}
	vars := getenvFrom(map[string]string{"DATABASE_URL": url, "ADDR": "127.0.0.1:0", "NOTIFY_URL": "http://127.0.0.1:9/", "NOTIFY_SECRET": "s", "ONCELEDGER_API_KEYS": serveTestKey})
	err = run(ctx, []string{"serve"}, vars, &output{}, &output{})
	if err == nil || !strings.Contains(err.Error(), "onceledger migrate up") {
		t.Fatalf("serve without river's tables: %v, want a refusal naming `onceledger migrate up`", err)
	}
}

// A top-up event that Stripe delivers 20 times, half of them at once, posts one entry and so sends
// the receiver one notification: one Idempotency-Key, delivered once.
func TestRedeliveredTopupEventNotifiesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.URL(t)

	var (
		mu   sync.Mutex
		keys []string
	)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
	}))
	t.Cleanup(recv.Close)
	base := startServe(t, map[string]string{
		"DATABASE_URL": url, "NOTIFY_URL": recv.URL, "NOTIFY_SECRET": "s", "STRIPE_WEBHOOK_SECRET": loadSecret,
	})
	pool := openPool(t, url)
	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_notify_once", "usd", 0); err != nil {
		t.Fatal(err)
	}

	event := stripeEvent("evt_notify_once", "checkout.session.completed", map[string]any{
		"id": "cs_notify_once", "object": "checkout.session", "payment_status": "paid", "amount_total": 900,
		"currency": "usd", "payment_intent": "pi_notify_once", "metadata": map[string]any{"account_id": "acct_notify_once"},
	})
	deliver := func() {
		if status, err := deliverOnce(http.DefaultClient, base, event); err != nil || status != http.StatusOK {
			t.Errorf("delivery answered %d, %v", status, err)
		}
	}
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() { defer wg.Done(); deliver() }()
	}
	wg.Wait()
	for range 10 {
		deliver()
	}

	// Wait until the job is worked, then a little longer for any second delivery that should not come.
	deadline := time.Now().Add(15 * time.Second)
	for {
		var done int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&done); err != nil {
			t.Fatal(err)
		}
		if done > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the notification was never delivered")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	var jobs int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&jobs); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if jobs != 1 || len(keys) != 1 || keys[0] == "" {
		t.Fatalf("%d jobs and deliveries with keys %q; want one job delivered once", jobs, keys)
	}
}
