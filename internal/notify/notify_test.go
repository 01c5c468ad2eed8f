package notify_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/notify"
)

const secret = "notify_secret_for_tests"

// delivery is one request the receiver got.
type delivery struct {
	key       string
	signature string
	body      []byte
}

// receiver is an httptest server that records every delivery and answers with status(n) for the
// n-th one (counting from 1).
type receiver struct {
	url    string
	mu     sync.Mutex
	got    []delivery
	status func(n int) int
}

func newReceiver(t *testing.T, status func(n int) int) *receiver {
	t.Helper()
	r := &receiver{status: status}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, delivery{key: req.Header.Get("Idempotency-Key"), signature: req.Header.Get(notify.SignatureHeader), body: body})
		n := len(r.got)
		r.mu.Unlock()
		w.WriteHeader(r.status(n))
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

func always(code int) func(int) int { return func(int) int { return code } }

func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// keys counts the deliveries per Idempotency-Key.
func (r *receiver) keys() map[string]int {
	out := map[string]int{}
	for _, d := range r.deliveries() {
		out[d.key]++
	}
	return out
}

// testConfig delivers to url with fast retries.
func testConfig(t *testing.T, url string) notify.Config {
	return notify.Config{
		URL: url, Secret: secret, Log: slog.New(slog.NewTextHandler(t.Output(), nil)),
		RetryBase: 10 * time.Millisecond, Timeout: 5 * time.Second,
	}
}

// notifier is a Notifier and the River client it enqueues through, built as the binary builds them
// (the delivery workers registered), polling fast.
type notifier struct {
	*notify.Notifier
	jobs *river.Client[pgx.Tx]
}

// newNotifier returns a notifier whose client is stopped when the test ends (before its pool closes:
// cleanups run last-registered first).
func newNotifier(t *testing.T, pool *pgxpool.Pool, cfg notify.Config) notifier {
	t.Helper()
	workers, queues := river.NewWorkers(), map[string]river.QueueConfig{}
	if err := notify.AddWorkers(workers, queues, cfg); err != nil {
		t.Fatal(err)
	}
	jobs, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger: cfg.Log, Workers: workers, Queues: queues,
		FetchPollInterval: 20 * time.Millisecond, FetchCooldown: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := jobs.Stop(ctx); err != nil {
			t.Errorf("stop notifications: %v", err)
		}
	})
	return notifier{notify.NewNotifier(jobs, cfg), jobs}
}

func start(t *testing.T, n notifier) {
	t.Helper()
	if err := n.jobs.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// running returns a fresh database holding accountID, a receiver answering status(n) to its n-th
// request, and a Ledger whose postings notify that receiver through a running Notifier.
func running(t *testing.T, accountID string, status func(n int) int) (*pgxpool.Pool, *receiver, *db.Ledger) {
	t.Helper()
	pool := dbtest.New(t)
	createAccount(t, pool, accountID)
	recv := newReceiver(t, status)
	n := newNotifier(t, pool, testConfig(t, recv.url))
	start(t, n)
	return pool, recv, dbtest.Ledger(t, pool, db.LedgerConfig{OnPosted: n.Enqueue})
}

func createAccount(t *testing.T, pool *pgxpool.Pool, id string) {
	t.Helper()
	if _, err := dbtest.Ledger(t, pool).CreateAccount(context.Background(), id, "usd", 0); err != nil {
		t.Fatalf("create account %s: %v", id, err)
	}
}

// topup is the posting a Stripe top-up event produces; every redelivery of the event asks for it again.
func topup(accountID, eventID string, amount int64) db.Posting {
	return db.Posting{AccountID: accountID, Kind: db.KindTopup, Amount: amount, Description: "top-up", DedupeKey: "stripe:" + eventID}
}

func post(ctx context.Context, pool *pgxpool.Pool, l *db.Ledger, p db.Posting) (db.Posted, error) {
	var out db.Posted
	err := db.InTx(ctx, pool, func(tx pgx.Tx) error {
		var err error
		out, err = l.Post(ctx, tx, p)
		return err
	})
	return out, err
}

// job is the notification job of an entry, as River keeps it.
type job struct {
	state    string
	attempts int
}

func jobs(t *testing.T, pool *pgxpool.Pool) map[string]job {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT args->>'id', state::text, attempt FROM river_job WHERE kind = $1`, notify.Args{}.Kind())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]job{}
	for rows.Next() {
		var id string
		var j job
		if err := rows.Scan(&id, &j.state, &j.attempts); err != nil {
			t.Fatal(err)
		}
		out[id] = j
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// waitForState waits until the notification's job is in state; River works it in the background.
func waitForState(t *testing.T, pool *pgxpool.Pool, id, state string) job {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		j := jobs(t, pool)[id]
		if j.state == state {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("notification %s: job is %+v, want state %s", id, j, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func balance(t *testing.T, pool *pgxpool.Pool, id string) int64 {
	t.Helper()
	acct, err := db.GetAccount(context.Background(), pool, id)
	if err != nil {
		t.Fatal(err)
	}
	return acct.Balance
}

// A top-up event delivered 20 times, half of them at once, posts one entry and notifies the receiver
// under exactly one Idempotency-Key, once.
func TestRedeliveredTopupNotifiesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, recv, ledger := running(t, "acct_redeliver", always(http.StatusOK))

	var (
		mu     sync.Mutex
		posted []db.Posted
		wg     sync.WaitGroup
	)
	deliver := func() {
		p, err := post(ctx, pool, ledger, topup("acct_redeliver", "evt_redeliver", 500))
		if err != nil {
			t.Errorf("post: %v", err)
			return
		}
		mu.Lock()
		posted = append(posted, p)
		mu.Unlock()
	}
	for range 10 {
		wg.Go(deliver)
	}
	for range 10 {
		deliver()
	}
	wg.Wait()

	var first []db.Posted
	for _, p := range posted {
		if p.New {
			first = append(first, p)
		}
	}
	if len(first) != 1 || len(posted) != 20 {
		t.Fatalf("%d of %d deliveries posted, want exactly 1 of 20", len(first), len(posted))
	}
	if got := balance(t, pool, "acct_redeliver"); got != 500 {
		t.Fatalf("balance = %d, want 500", got)
	}
	id := notify.NotificationID(first[0].Entry.ID)
	waitForState(t, pool, id, "completed")
	if all := jobs(t, pool); len(all) != 1 {
		t.Fatalf("jobs = %v, want only %s", all, id)
	}
	keys := recv.keys()
	if len(keys) != 1 || keys[id] != 1 {
		t.Fatalf("receiver got keys %v, want %s exactly once", keys, id)
	}

	var got notify.Notification
	if err := json.Unmarshal(recv.deliveries()[0].body, &got); err != nil {
		t.Fatal(err)
	}
	want := notify.Notification{
		ID: id, Type: "entry.posted", AccountID: "acct_redeliver", Kind: db.KindTopup, Amount: 500, Balance: 500,
		CreatedAt: first[0].Entry.CreatedAt.UTC(),
	}
	if !got.CreatedAt.Equal(want.CreatedAt) {
		t.Fatalf("created_at = %v, want %v", got.CreatedAt, want.CreatedAt)
	}
	got.CreatedAt = want.CreatedAt
	if got != want {
		t.Fatalf("notification = %+v, want %+v", got, want)
	}
}

// A posting whose transaction fails after the enqueue leaves neither the entry nor its job, and the
// receiver hears nothing of it.
func TestRolledBackPostingNotifiesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, recv, ledger := running(t, "acct_rollback", always(http.StatusOK))

	forced := errors.New("forced failure after posting")
	var doomed db.Posted
	err := db.InTx(ctx, pool, func(tx pgx.Tx) error {
		var err error
		if doomed, err = ledger.Post(ctx, tx, topup("acct_rollback", "evt_doomed", 700)); err != nil {
			return err
		}
		if !doomed.New {
			t.Errorf("the doomed posting was a replay")
		}
		var queued int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&queued); err != nil || queued != 1 {
			t.Errorf("inside the transaction: %d jobs (%v), want the enqueued one", queued, err)
		}
		return forced
	})
	if !errors.Is(err, forced) {
		t.Fatalf("InTx = %v, want the forced failure", err)
	}
	if all := jobs(t, pool); len(all) != 0 {
		t.Fatalf("after rollback, jobs = %v, want none", all)
	}
	if got := balance(t, pool, "acct_rollback"); got != 0 {
		t.Fatalf("balance = %d, want 0", got)
	}

	// A later posting is delivered, and it is the only thing the receiver ever got.
	kept, err := post(ctx, pool, ledger, topup("acct_rollback", "evt_kept", 300))
	if err != nil {
		t.Fatal(err)
	}
	id := notify.NotificationID(kept.Entry.ID)
	waitForState(t, pool, id, "completed")
	if keys := recv.keys(); len(keys) != 1 || keys[id] != 1 {
		t.Fatalf("receiver got keys %v, want only %s (the rolled-back %s never)", keys, id, notify.NotificationID(doomed.Entry.ID))
	}
}

// A receiver that fails twice gets a third attempt with the same key and body, and is then done.
func TestFailedDeliveriesAreRetriedWithTheSameKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, recv, ledger := running(t, "acct_retry", func(n int) int {
		if n <= 2 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})

	p, err := post(ctx, pool, ledger, topup("acct_retry", "evt_retry", 900))
	if err != nil {
		t.Fatal(err)
	}
	id := notify.NotificationID(p.Entry.ID)
	if j := waitForState(t, pool, id, "completed"); j.attempts != 3 {
		t.Fatalf("job completed after %d attempts, want 3", j.attempts)
	}
	got := recv.deliveries()
	if len(got) != 3 {
		t.Fatalf("receiver got %d requests, want 3", len(got))
	}
	for i, d := range got {
		if d.key != id {
			t.Fatalf("attempt %d: Idempotency-Key %q, want %q", i+1, d.key, id)
		}
		if string(d.body) != string(got[0].body) {
			t.Fatalf("attempt %d: body %s differs from the first %s", i+1, d.body, got[0].body)
		}
	}
	if got := balance(t, pool, "acct_retry"); got != 900 {
		t.Fatalf("balance = %d, want 900", got)
	}
}

// A receiver that never accepts gets MaxAttempts deliveries, after which the job stays visible as
// discarded.
func TestDeliveryGivesUpAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	createAccount(t, pool, "acct_giveup")
	recv := newReceiver(t, always(http.StatusServiceUnavailable))
	cfg := testConfig(t, recv.url)
	cfg.MaxAttempts = 4
	n := newNotifier(t, pool, cfg)
	start(t, n)

	p, err := post(ctx, pool, dbtest.Ledger(t, pool, db.LedgerConfig{OnPosted: n.Enqueue}), topup("acct_giveup", "evt_giveup", 100))
	if err != nil {
		t.Fatal(err)
	}
	id := notify.NotificationID(p.Entry.ID)
	if j := waitForState(t, pool, id, "discarded"); j.attempts != 4 {
		t.Fatalf("job discarded after %d attempts, want 4", j.attempts)
	}
	if keys := recv.keys(); keys[id] != 4 {
		t.Fatalf("receiver got %v, want %s 4 times", keys, id)
	}
	discarded, err := notify.ListDiscarded(ctx, n.jobs, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(discarded) != 1 || discarded[0].ID != id || discarded[0].AccountID != "acct_giveup" ||
		discarded[0].Amount != 100 || discarded[0].Attempts != 4 || discarded[0].LastError == "" {
		t.Fatalf("ListDiscarded = %+v, want %s after 4 attempts with its last error", discarded, id)
	}
}

// The signature on a real delivery verifies with the secret, and not with another secret, another
// body or long after.
func TestDeliverySignatureVerifies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, recv, ledger := running(t, "acct_sign", always(http.StatusOK))

	p, err := post(ctx, pool, ledger, topup("acct_sign", "evt_sign", 250))
	if err != nil {
		t.Fatal(err)
	}
	waitForState(t, pool, notify.NotificationID(p.Entry.ID), "completed")
	d := recv.deliveries()[0]
	now := time.Now()

	if err := notify.Verify(secret, d.signature, d.body, now, 5*time.Minute); err != nil {
		t.Fatalf("signature %q does not verify with the secret: %v", d.signature, err)
	}
	for name, check := range map[string]error{
		"wrong secret":     notify.Verify("another_secret", d.signature, d.body, now, 5*time.Minute),
		"tampered body":    notify.Verify(secret, d.signature, append([]byte(" "), d.body...), now, 5*time.Minute),
		"too old":          notify.Verify(secret, d.signature, d.body, now.Add(time.Hour), 5*time.Minute),
		"no header":        notify.Verify(secret, "", d.body, now, 5*time.Minute),
		"header truncated": notify.Verify(secret, d.signature[:len(d.signature)-2], d.body, now, 5*time.Minute),
	} {
		if !errors.Is(check, notify.ErrBadSignature) {
			t.Errorf("%s: Verify = %v, want ErrBadSignature", name, check)
		}
	}
}

// The documented scheme, computed independently: t=<unix>,v1=hex(HMAC-SHA256(secret, "<unix>.<body>")).
func TestSignMatchesTheDocumentedScheme(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"ntf_1"}`)
	at := time.Unix(1700000000, 0)
	// printf '%s' '1700000000.{"id":"ntf_1"}' | openssl dgst -sha256 -hmac notify_secret_for_tests
	const want = "t=1700000000,v1=" + "e729cf4c0e26580f132f4b5969251cc06e718dee5005105ae0431b43b8f640eb"
	if got := notify.Sign(secret, at, body); got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
}

// Notifications committed while no worker runs (the server is down between commit and delivery) are
// delivered once a worker starts again.
func TestCommittedWhileStoppedIsDeliveredAfterRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	createAccount(t, pool, "acct_restart")
	recv := newReceiver(t, always(http.StatusOK))

	before := newNotifier(t, pool, testConfig(t, recv.url))
	start(t, before)
	if err := before.jobs.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := post(ctx, pool, dbtest.Ledger(t, pool, db.LedgerConfig{OnPosted: before.Enqueue}), topup("acct_restart", "evt_restart", 400))
	if err != nil {
		t.Fatal(err)
	}
	id := notify.NotificationID(p.Entry.ID)
	if j := jobs(t, pool)[id]; j.state != "available" || len(recv.deliveries()) != 0 {
		t.Fatalf("while stopped: job %+v, %d deliveries; want it waiting, undelivered", j, len(recv.deliveries()))
	}

	start(t, newNotifier(t, pool, testConfig(t, recv.url)))
	waitForState(t, pool, id, "completed")
	if keys := recv.keys(); len(keys) != 1 || keys[id] != 1 {
		t.Fatalf("receiver got %v, want %s once", keys, id)
	}
}

// A server stopped in the middle of a delivery (the receiver never answered) delivers again after
// the restart, with the same Idempotency-Key, so the receiver can tell it is the same notification.
func TestInterruptedDeliveryIsRetriedAfterRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	createAccount(t, pool, "acct_interrupt")

	arrived, released := make(chan struct{}), make(chan struct{})
	var (
		once     sync.Once
		firstKey string
	)
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() {
			firstKey = r.Header.Get("Idempotency-Key")
			close(arrived)
		})
		// Never answers while the sender waits; released when the test ends.
		select {
		case <-r.Context().Done():
		case <-released:
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(released) })

	before := newNotifier(t, pool, testConfig(t, hang.URL))
	start(t, before)
	p, err := post(ctx, pool, dbtest.Ledger(t, pool, db.LedgerConfig{OnPosted: before.Enqueue}), topup("acct_interrupt", "evt_interrupt", 800))
	if err != nil {
		t.Fatal(err)
	}
	id := notify.NotificationID(p.Entry.ID)
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the first delivery never arrived")
	}
	// Shutdown out of grace: the delivery in flight is cancelled and stays queued.
	if err := before.jobs.StopAndCancel(ctx); err != nil {
		t.Fatal(err)
	}
	// River gives the attempt back on shutdown: the job waits, available, for the next worker.
	if j := jobs(t, pool)[id]; j.state != "available" {
		t.Fatalf("after the interrupted delivery: job %+v, want it available again", j)
	}
	if firstKey != id {
		t.Fatalf("interrupted delivery carried Idempotency-Key %q, want %q", firstKey, id)
	}

	recv := newReceiver(t, always(http.StatusOK))
	start(t, newNotifier(t, pool, testConfig(t, recv.url)))
	waitForState(t, pool, id, "completed")
	if keys := recv.keys(); len(keys) != 1 || keys[id] != 1 {
		t.Fatalf("receiver got %v, want %s once", keys, id)
	}
}

// The backoff doubles from RetryBase and is capped, so ten attempts at the default base span hours,
// not days.
func TestRetryWaitDoubles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		failures int
		want     time.Duration
	}{
		{1, 30 * time.Second},
		{2, time.Minute},
		{3, 2 * time.Minute},
		{9, 128 * time.Minute},
		{12, 6 * time.Hour},
		{400, 6 * time.Hour},
	} {
		if got := notify.RetryWait(30*time.Second, tc.failures); got != tc.want {
			t.Errorf("wait after %d failures = %s, want %s", tc.failures, got, tc.want)
		}
	}
}

// The queue itself refuses a second job for one entry, even if a path handed the entry over twice.
func TestEnqueueIsUniquePerEntry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	createAccount(t, pool, "acct_unique")
	n := newNotifier(t, pool, testConfig(t, "http://127.0.0.1:9/never-started"))
	p, err := post(ctx, pool, new(db.Ledger), topup("acct_unique", "evt_unique", 100))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := db.InTx(ctx, pool, func(tx pgx.Tx) error { return n.Enqueue(ctx, tx, []db.Entry{p.Entry, p.Entry}) }); err != nil {
			t.Fatal(err)
		}
	}
	if all := jobs(t, pool); len(all) != 1 {
		t.Fatalf("jobs = %v, want one for %s", all, notify.NotificationID(p.Entry.ID))
	}
}

// Three decisions billed in one chunk (-7, -5, -3 from 1000) notify the balance each entry left —
// 993, 988, 985 — not the chunk's final balance.
func TestBilledUsageNotifiesEachEntrysOwnBalance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const acct = "acct_billed"
	pool, recv, ledger := running(t, acct, always(http.StatusOK))
	if _, err := post(ctx, pool, ledger, topup(acct, "evt_billed", 1000)); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := db.StoreDecisions(ctx, pool, []db.Decision{
		{ID: "d1", AccountID: acct, Cost: 7, OccurredAt: now},
		{ID: "d2", AccountID: acct, Cost: 5, OccurredAt: now},
		{ID: "d3", AccountID: acct, Cost: 3, OccurredAt: now},
	}); err != nil {
		t.Fatal(err)
	}
	chunk, err := ledger.BillChunk(ctx, 0, 3, 100)
	if err != nil || len(chunk.Posted) != 3 {
		t.Fatalf("bill chunk = %+v, %v; want three entries", chunk, err)
	}
	want := map[string]int64{"decision:d1": 993, "decision:d2": 988, "decision:d3": 985}
	byID := map[string]int64{}
	for _, p := range chunk.Posted {
		if p.BalanceAfter != want[p.DedupeKey] {
			t.Fatalf("entry %s: balance_after %d, want %d", p.DedupeKey, p.BalanceAfter, want[p.DedupeKey])
		}
		id := notify.NotificationID(p.ID)
		byID[id] = p.BalanceAfter
		waitForState(t, pool, id, "completed")
	}
	if got := balance(t, pool, acct); got != 985 {
		t.Fatalf("balance = %d, want 985", got)
	}
	seen := 0
	for _, d := range recv.deliveries() {
		var n notify.Notification
		if err := json.Unmarshal(d.body, &n); err != nil {
			t.Fatal(err)
		}
		if b, ok := byID[n.ID]; ok {
			seen++
			if n.Balance != b {
				t.Fatalf("notification %s carries balance %d, want %d", n.ID, n.Balance, b)
			}
		}
	}
	if seen != 3 {
		t.Fatalf("%d usage notifications delivered, want 3", seen)
	}
}
