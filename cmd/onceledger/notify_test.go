package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/notify"
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
	enqueuer, err := notify.New(pool, notify.Config{URL: recv.URL, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.CreateAccount(ctx, pool, "acct_serve_notify", "usd", 0); err != nil {
		t.Fatal(err)
	}
	var posted db.Posted
	err = db.InTx(ctx, pool, func(tx pgx.Tx) error {
		posted, err = db.Ledger{OnPosted: enqueuer.Enqueue}.Post(ctx, tx, db.Posting{
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
	vars := getenvFrom(map[string]string{"DATABASE_URL": url, "ADDR": "127.0.0.1:0", "NOTIFY_URL": "http://127.0.0.1:9/", "NOTIFY_SECRET": "s"})
	err = run(ctx, []string{"serve"}, vars, &output{}, &output{})
	if err == nil || !strings.Contains(err.Error(), "onceledger migrate up") {
		t.Fatalf("serve without river's tables: %v, want a refusal naming `onceledger migrate up`", err)
	}
}
