package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

const replicaAPIKey = "replica_test_key_onceledger_000000"

// adjust posts one adjustment to base under key and returns the status and whether it was posted.
func adjust(client *http.Client, base, account, key string, amount int64) (int, bool, error) {
	body, _ := json.Marshal(map[string]any{"amount": amount, "description": "replica " + key})
	req, err := http.NewRequest(http.MethodPost, base+"/v1/accounts/"+account+"/adjustments", bytes.NewReader(body))
	if err != nil {
		return 0, false, err
	}
	req.Header.Set("Authorization", "Bearer "+replicaAPIKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	var answer struct {
		Posted bool `json:"posted"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&answer)
	return resp.StatusCode, answer.Posted, nil
}

// Two `onceledger serve` processes on one database, as it is deployed: a storm of webhook deliveries
// (every event delivered to both, concurrently, in different orders) and adjustments whose every key
// is sent twice to each process at once (group commit batches per process, so the two batch the same
// key independently). The ledger is exact to the entry, every key answered 201 once and 200 after,
// and `onceledger verify` is clean.
func TestTwoServeProcessesOnOneDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.URL(t)
	w := newWorkload(60)
	w.createAccounts(t, url)
	pool := openPool(t, url)
	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_replicas", "gbp", 0); err != nil {
		t.Fatal(err)
	}
	if err := db.InTx(ctx, pool, func(tx db.Tx) error {
		_, err := ledger.Post(ctx, tx, db.Posting{AccountID: "acct_replicas", Kind: db.KindAdjustment, Amount: 10000, DedupeKey: "api:acct_replicas:funding"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	replicas := make([]string, 2)
	for i := range replicas {
		replicas[i] = startServe(t, map[string]string{
			"DATABASE_URL": url, "STRIPE_WEBHOOK_SECRET": loadSecret, "ONCELEDGER_API_KEYS": replicaAPIKey,
		})
	}

	var wg sync.WaitGroup
	for _, base := range replicas {
		wg.Go(func() { w.deliverAll(t, base, 6, &delivery{}) })
	}
	// 20 keys, credits of 100 and debits of 50, each sent twice to each process at once.
	const keys = 20
	var (
		mu      sync.Mutex
		answers = map[string][]int{} // key → statuses
		posted  = map[string]int{}   // key → answers saying posted
	)
	client := &http.Client{Timeout: 10 * time.Second}
	for k := range keys {
		key, amount := fmt.Sprintf("storm-%d", k), int64(100)
		if k%2 == 1 {
			amount = -50
		}
		for attempt := range 4 {
			base := replicas[attempt%2]
			wg.Go(func() {
				status, isPosted, err := adjust(client, base, "acct_replicas", key, amount)
				if err != nil {
					t.Errorf("adjustment %s: %v", key, err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				answers[key] = append(answers[key], status)
				if isPosted {
					posted[key]++
				}
			})
		}
	}
	wg.Wait()

	for k := range keys {
		key := fmt.Sprintf("storm-%d", k)
		created := 0
		for _, status := range answers[key] {
			switch status {
			case http.StatusCreated:
				created++
			case http.StatusOK:
			default:
				t.Errorf("key %s answered %v", key, answers[key])
			}
		}
		if created != 1 || posted[key] != 1 || len(answers[key]) != 4 {
			t.Errorf("key %s answered %v (%d posted), want one 201 and three 200", key, answers[key], posted[key])
		}
	}
	acct, err := db.GetAccount(ctx, pool, "acct_replicas")
	if err != nil {
		t.Fatal(err)
	}
	var entries int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM ledger WHERE account_id = 'acct_replicas'`).Scan(&entries); err != nil {
		t.Fatal(err)
	}
	if want := int64(10000 + keys/2*100 - keys/2*50); acct.Balance != want || entries != 1+keys {
		t.Errorf("acct_replicas: balance %d with %d entries, want %d with %d", acct.Balance, entries, want, 1+keys)
	}
	w.assertLedger(t, url) // every workload account to the entry, then verify
}
