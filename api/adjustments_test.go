package api

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/onceledger/onceledger/db"
)

func adjust(s *server, account, key string, body any) reply {
	s.t.Helper()
	return s.call(http.MethodPost, "/v1/accounts/"+account+"/adjustments", body, "Idempotency-Key", key)
}

func TestAdjustmentPostsOnceAndReplays(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_a", "usd", 0)
	s.createAccount("acct_b", "usd", 0)
	body := map[string]any{"amount": 300, "description": "goodwill"}

	first := adjust(s, "acct_a", "k1", body).want(t, http.StatusCreated, "")
	entry := first.JSON["entry"].(map[string]any)
	if first.JSON["posted"] != true || entry["amount"] != float64(300) || entry["kind"] != "adjustment" ||
		entry["dedupe_key"] != "api:acct_a:k1" {
		t.Fatalf("first: %s", first.Body)
	}
	replay := adjust(s, "acct_a", "k1", body).want(t, http.StatusOK, "")
	if replay.JSON["posted"] != false || replay.JSON["entry"].(map[string]any)["id"] != entry["id"] {
		t.Fatalf("replay is not the original entry: %s", replay.Body)
	}
	adjust(s, "acct_a", "k1", map[string]any{"amount": 301, "description": "goodwill"}).want(t, http.StatusConflict, "idempotency_conflict")
	adjust(s, "acct_a", "k1", map[string]any{"amount": 300, "description": "other"}).want(t, http.StatusConflict, "idempotency_conflict")
	adjust(s, "acct_a", "k1", map[string]any{"amount": 300}).want(t, http.StatusConflict, "idempotency_conflict")
	// The key is the caller's per account: another account's k1 is another adjustment.
	adjust(s, "acct_b", "k1", body).want(t, http.StatusCreated, "")

	s.wantMoney("acct_a", 300, 1)
	s.wantMoney("acct_b", 300, 1)
}

func TestAdjustmentRefusesOverdraw(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_o", "usd", 100)

	adjust(s, "acct_o", "debit-1", map[string]any{"amount": -150}).want(t, http.StatusConflict, "insufficient_balance")
	if b := s.balance("acct_o"); b != 100 {
		t.Fatalf("balance %d after a refused debit, want 100", b)
	}
	// A refused key stored nothing, so the same key can be used once the balance allows it.
	adjust(s, "acct_o", "debit-1", map[string]any{"amount": -100}).want(t, http.StatusCreated, "")
	adjust(s, "acct_o", "debit-2", map[string]any{"amount": -1}).want(t, http.StatusConflict, "insufficient_balance")
	s.wantMoney("acct_o", 0, 2) // the credit and one debit
}

func TestAdjustmentRefusesBadInput(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_bad", "usd", 0)
	account := "acct_bad"
	cases := []struct {
		name    string
		account string
		key     string
		body    any
		status  int
		code    string
	}{
		{"no Idempotency-Key", account, "", `{"amount":5}`, 400, "missing_idempotency_key"},
		{"Idempotency-Key too long", account, strings.Repeat("k", 256), `{"amount":5}`, 400, "invalid_idempotency_key"},
		{"Idempotency-Key with a colon", account, "a:b", `{"amount":5}`, 400, "invalid_idempotency_key"},
		{"Idempotency-Key with a space", account, "a b", `{"amount":5}`, 400, "invalid_idempotency_key"},
		{"zero amount", account, "k", `{"amount":0}`, 400, "invalid_amount"},
		{"missing amount", account, "k", `{"description":"x"}`, 400, "invalid_amount"},
		{"fractional amount", account, "k", `{"amount":1.5}`, 400, "invalid_amount"},
		{"amount as a string", account, "k", `{"amount":"5"}`, 400, "invalid_amount"},
		{"amount beyond int64", account, "k", `{"amount":9223372036854775808}`, 400, "invalid_amount"},
		{"amount that would overflow a balance", account, "k", `{"amount":9223372036854775807}`, 400, "invalid_amount"},
		{"description with NUL", account, "k", `{"amount":5,"description":"a\u0000b"}`, 400, "invalid_description"},
		{"description of the wrong type", account, "k", `{"amount":5,"description":7}`, 400, "invalid_description"},
		{"description too long", account, "k", `{"amount":5,"description":"` + strings.Repeat("d", 1001) + `"}`, 400, "invalid_description"},
		{"unknown field", account, "k", `{"amount":5,"kind":"topup"}`, 400, "unknown_field"},
		{"empty body", account, "k", ``, 400, "empty_body"},
		{"invalid account id", "a$b", "k", `{"amount":5}`, 400, "invalid_account_id"},
		{"unknown account", "nobody", "k", `{"amount":5}`, 404, "account_not_found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			adjust(s.in(t), c.account, c.key, c.body).want(t, c.status, c.code)
		})
	}
	if n := s.count(`SELECT count(*) FROM ledger`); n != 0 {
		t.Fatalf("bad input wrote %d entries", n)
	}
}

// concurrently runs request n times at once and counts the statuses it returned.
func concurrently(n int, request func(i int) int) map[int]int {
	statuses := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { statuses <- request(i) })
	}
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for st := range statuses {
		count[st]++
	}
	return count
}

// TestAdjustmentSameKeyConcurrently: 30 simultaneous requests with one Idempotency-Key post one entry;
// the others are replays of it.
func TestAdjustmentSameKeyConcurrently(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_c", "usd", 0)

	const n = 30
	count := concurrently(n, func(int) int {
		return adjust(s, "acct_c", "same-key", map[string]any{"amount": 700, "description": "once"}).Status
	})
	if count[http.StatusCreated] != 1 || count[http.StatusOK] != n-1 {
		t.Fatalf("statuses %v, want one 201 and %d 200", count, n-1)
	}
	s.wantMoney("acct_c", 700, 1)
}

// TestAdjustmentsConcurrentDebitsNeverOverdraw: 30 simultaneous debits with their own keys against a
// balance covering 14 of them: exactly 14 post, the balance never goes below zero, and it equals the
// sum of the entries.
func TestAdjustmentsConcurrentDebitsNeverOverdraw(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_d", "usd", 1000)

	const n, debit = 30, 70
	count := concurrently(n, func(i int) int {
		return adjust(s, "acct_d", fmt.Sprintf("debit-%d", i), map[string]any{"amount": -debit}).Status
	})
	if count[http.StatusCreated] != 1000/debit || count[http.StatusConflict] != n-1000/debit {
		t.Fatalf("statuses %v, want %d posted and the rest refused", count, 1000/debit)
	}
	b := s.balance("acct_d")
	if b != 1000-debit*(1000/debit) || b < 0 {
		t.Fatalf("balance %d, want %d", b, 1000-debit*(1000/debit))
	}
	if sum := s.count(`SELECT coalesce(sum(amount), 0) FROM ledger WHERE account_id = 'acct_d'`); sum != b {
		t.Fatalf("entries sum to %d, balance is %d", sum, b)
	}
	if debits := s.count(`SELECT count(*) FROM ledger WHERE account_id = 'acct_d' AND amount < 0`); debits != int64(count[http.StatusCreated]) {
		t.Fatalf("%d debit entries, %d answered 201", debits, count[http.StatusCreated])
	}
}

// TestAdjustmentRetryAnsweredAsReplayWhileOthersPost: a debit that took the balance to zero, retried
// ten times at once while ten unrelated credits post to the same account, is a replay every time
// (200, posted:false), never insufficient_balance: the stored key is answered before admission. Each
// burst starts from a balance of zero, so the retried debit never fits a second time.
func TestAdjustmentRetryAnsweredAsReplayWhileOthersPost(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_r", "usd", 0)

	const bursts, retries, credits = 15, 10, 10
	var wantEntries int64
	for b := range bursts {
		adjust(s, "acct_r", fmt.Sprintf("fund-%d", b), map[string]any{"amount": 100}).want(t, http.StatusCreated, "")
		order := map[string]any{"amount": -s.balance("acct_r"), "description": "order"}
		adjust(s, "acct_r", fmt.Sprintf("order-%d", b), order).want(t, http.StatusCreated, "")
		wantEntries += 2

		var mu sync.Mutex
		var wrong []string
		count := concurrently(retries+credits, func(i int) int {
			if i < credits {
				return adjust(s, "acct_r", fmt.Sprintf("credit-%d-%d", b, i), map[string]any{"amount": 1}).Status
			}
			r := adjust(s, "acct_r", fmt.Sprintf("order-%d", b), order)
			if r.Status != http.StatusOK || r.JSON["posted"] != false {
				mu.Lock()
				wrong = append(wrong, fmt.Sprintf("%d %s", r.Status, r.Body))
				mu.Unlock()
			}
			return r.Status
		})
		if len(wrong) > 0 {
			t.Fatalf("burst %d: retries of a posted debit answered %v (statuses %v)", b, wrong, count)
		}
		if count[http.StatusCreated] != credits {
			t.Fatalf("burst %d: statuses %v, want %d credits posted", b, count, credits)
		}
		wantEntries += credits
		s.wantMoney("acct_r", credits, wantEntries)
	}
}

// TestAdjustmentBeyondBigintIsAConflict: a credit that would carry the balance beyond a bigint is 409
// amount_out_of_range, not a 500, and writes nothing.
func TestAdjustmentBeyondBigintIsAConflict(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_max", "usd", 0)
	s.post(db.Posting{AccountID: "acct_max", Kind: db.KindTopup, Amount: math.MaxInt64 - 5, DedupeKey: "stripe:evt_max"})

	adjust(s, "acct_max", "over", map[string]any{"amount": 10}).want(t, http.StatusConflict, "amount_out_of_range")
	adjust(s, "acct_max", "fits", map[string]any{"amount": 5}).want(t, http.StatusCreated, "")
	s.wantMoney("acct_max", math.MaxInt64, 2)
}
