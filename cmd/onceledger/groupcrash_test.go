package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

const groupCrashKey = "key_group_crash_onceledger_0000000"

// The server is SIGKILLed twice while 64 callers post adjustments and authorise holds on one hot
// account, so groups of both (db.Poster and db.HoldAuthoriser) are cut mid-transaction. Each caller
// retries its request until it is answered, as a client of an idempotent API does. Nothing answered
// is lost and nothing is applied twice: every key is one entry, every hold id one hold, and the
// balance and held amounts are exactly their sums.
func TestServerKilledMidGroupCommit(t *testing.T) {
	t.Parallel()
	url := dbtest.URL(t)
	ctx := context.Background()
	pool := openPool(t, url)
	const account = "acct_hot_crash"
	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, account, "usd", 0); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	base := "http://" + addr
	env := []string{"DATABASE_URL=" + url, "ADDR=" + addr, "ONCELEDGER_API_KEYS=" + groupCrashKey}
	server := startProcess(t, env)
	server.waitReady(t, base)

	// The account is funded first, so that every hold fits whatever order the groups take.
	const callers, perCaller = 64, 12
	client := &http.Client{Timeout: 10 * time.Second}
	if status := retryUntilAnswered(client, base+"/v1/accounts/"+account+"/adjustments", "fund",
		`{"amount":1000000,"description":"fund"}`, &atomic.Int64{}); status != http.StatusCreated {
		t.Fatalf("funding answered %d", status)
	}

	var answered, cutOff atomic.Int64
	cut := &atomic.Int64{} // attempts the crashes cut (transport errors)
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for i := range perCaller {
				key := fmt.Sprintf("c%d-%d", c, i)
				var status int
				if i%2 == 0 {
					status = retryUntilAnswered(client, base+"/v1/accounts/"+account+"/adjustments", key,
						`{"amount":1,"description":"crash"}`, cut)
				} else {
					status = retryUntilAnswered(client, base+"/v1/accounts/"+account+"/holds", "",
						`{"id":"`+key+`","amount":2,"expires_in":"1h"}`, cut)
				}
				if status != http.StatusCreated && status != http.StatusOK {
					t.Errorf("%s answered %d", key, status)
				}
				if status == http.StatusOK {
					cutOff.Add(1) // applied by an attempt whose answer the crash cut off
				}
				answered.Add(1)
			}
		})
	}
	for _, at := range []int64{callers * perCaller / 4, callers * perCaller / 2} {
		for deadline := time.Now().Add(time.Minute); answered.Load() < at; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("only %d requests answered in a minute", answered.Load())
			}
		}
		server.kill(t)
		t.Logf("SIGKILL after %d requests answered", answered.Load())
		server = startProcess(t, env)
		server.waitReady(t, base)
	}
	wg.Wait()
	t.Logf("%d attempts cut by the crashes; %d requests applied by an attempt whose answer was lost, then answered as replays",
		cut.Load(), cutOff.Load())
	if cut.Load() == 0 {
		t.Fatal("no request was in flight when the server died: the test proves nothing")
	}

	const adjustments, holds = callers * perCaller / 2, callers * perCaller / 2
	acct, err := db.GetAccount(ctx, pool, account)
	if err != nil {
		t.Fatal(err)
	}
	var entries, keys, heldHolds int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT dedupe_key) FROM ledger
		WHERE account_id = $1 AND description = 'crash'`, account).Scan(&entries, &keys); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM holds WHERE account_id = $1 AND status = 'held'`, account).Scan(&heldHolds); err != nil {
		t.Fatal(err)
	}
	if entries != adjustments || keys != adjustments || heldHolds != holds {
		t.Fatalf("%d entries under %d keys and %d holds, want %d, %d and %d", entries, keys, heldHolds, adjustments, adjustments, holds)
	}
	if acct.Balance != 1000000+adjustments || acct.Held != 2*holds {
		t.Fatalf("balance %d held %d, want %d and %d", acct.Balance, acct.Held, 1000000+adjustments, 2*holds)
	}
	if violations, err := db.Verify(ctx, pool, time.Now(), time.Hour, time.Hour); err != nil || len(violations) > 0 {
		t.Fatalf("verify: %v %v", violations, err)
	}
}

// retryUntilAnswered posts body (with an Idempotency-Key when key is set) until the server answers
// anything but a transport error or a 5xx, and returns that status; 0 if it never does. cut counts the
// transport errors.
func retryUntilAnswered(client *http.Client, url, key, body string, cut *atomic.Int64) int {
	backoff := 10 * time.Millisecond
	for range maxAttempts {
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
		if err != nil {
			return 0
		}
		req.Header.Set("Authorization", "Bearer "+groupCrashKey)
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := client.Do(req)
		if err != nil {
			cut.Add(1)
		} else {
			resp.Body.Close()
			if resp.StatusCode < 500 {
				return resp.StatusCode
			}
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, 200*time.Millisecond)
	}
	return 0
}

// The server is SIGKILLed twice while 32 senders deliver the load workload (top-ups, refunds, disputes,
// shuffled), so that transactions committing several deliveries' top-ups at once (webhook group
// commit, on by default) are cut mid-way. Every event is redelivered until accepted, as Stripe does,
// and the ledger ends exactly as the workload says: nothing lost, nothing applied twice.
func TestServerKilledMidWebhookGroupCommit(t *testing.T) {
	t.Parallel()
	w := newWorkload(300)
	d, _, url := deliverThroughCrashes(t, w, 32, []int64{int64(len(w.events)) / 4, int64(len(w.events)) / 2})
	t.Logf("answers: %v", d.statuses)
	if d.count("transport error") == 0 {
		t.Fatal("no delivery saw the server die: the test proves nothing")
	}
	w.assertLedger(t, url)

	// The top-ups were committed in groups: fewer transactions than credits.
	pool := openPool(t, url)
	var credits, transactions int
	if err := pool.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT xmin::text) FROM ledger WHERE kind = 'topup'`).
		Scan(&credits, &transactions); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d top-ups credited in %d transactions", credits, transactions)
	if transactions >= credits {
		t.Fatalf("%d top-ups in %d transactions: no group was committed, the test proves nothing", credits, transactions)
	}
}
