package api

import (
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"

	"github.com/onceledger/onceledger/db"
)

// entryPage fetches one page and returns its entry ids and next cursor ("" at the end).
func entryPage(s *server, account string, limit int, before string) ([]int64, string) {
	s.t.Helper()
	q := url.Values{"limit": {fmt.Sprint(limit)}}
	if before != "" {
		q.Set("before", before)
	}
	got := s.call(http.MethodGet, "/v1/accounts/"+account+"/entries?"+q.Encode(), nil).want(s.t, http.StatusOK, "")
	var ids []int64
	for _, e := range got.JSON["entries"].([]any) {
		ids = append(ids, int64(e.(map[string]any)["id"].(float64)))
	}
	next, _ := got.JSON["next"].(string)
	return ids, next
}

// walkEntries follows the next cursors from the newest page to the last, returning every id seen and
// each page's size.
func walkEntries(s *server, account string, limit int) (ids []int64, sizes []int) {
	s.t.Helper()
	next := ""
	for {
		page, cursor := entryPage(s, account, limit, next)
		ids, sizes = append(ids, page...), append(sizes, len(page))
		if cursor == "" {
			return ids, sizes
		}
		next = cursor
	}
}

func credits(account string, n, from int) []db.Posting {
	ps := make([]db.Posting, n)
	for i := range ps {
		ps[i] = db.Posting{AccountID: account, Kind: db.KindAdjustment, Amount: int64(from + i + 1)}
	}
	return ps
}

func TestEntriesNewestFirstInPages(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_p", "usd", 0)
	s.post(credits("acct_p", 7, 0)...)

	all, sizes := walkEntries(s, "acct_p", 3)
	if fmt.Sprint(sizes) != "[3 3 1]" {
		t.Fatalf("page sizes %v, want [3 3 1]", sizes)
	}
	for i := 1; i < len(all); i++ {
		if all[i] >= all[i-1] {
			t.Fatalf("ids %v are not newest first", all)
		}
	}
	// An exact multiple of the page size ends with an empty page, not a dangling cursor.
	ids, cursor := entryPage(s, "acct_p", 7, "")
	if len(ids) != 7 || cursor != "" {
		t.Fatalf("one full page: %d entries, next %q", len(ids), cursor)
	}
	got := s.call(http.MethodGet, "/v1/accounts/acct_p/entries", nil).want(t, http.StatusOK, "")
	if len(got.JSON["entries"].([]any)) != 7 || got.JSON["next"] != nil {
		t.Fatalf("default page: %s", got.Body)
	}

	for _, bad := range []struct{ query, code string }{
		{"limit=0", "invalid_limit"}, {"limit=501", "invalid_limit"}, {"limit=x", "invalid_limit"},
		{"before=0", "invalid_before"}, {"before=-4", "invalid_before"}, {"before=abc", "invalid_before"},
	} {
		s.call(http.MethodGet, "/v1/accounts/acct_p/entries?"+bad.query, nil).want(t, http.StatusBadRequest, bad.code)
	}
	s.call(http.MethodGet, "/v1/accounts/nobody/entries", nil).want(t, http.StatusNotFound, "account_not_found")
	s.call(http.MethodGet, "/v1/accounts/a%2Cb/entries", nil).want(t, http.StatusBadRequest, "invalid_account_id")
}

// TestEntriesWalkWhilePosting: a client walking the pages while entries are posted sees every entry
// that existed when it started exactly once (keyset on id; OFFSET would repeat some).
func TestEntriesWalkWhilePosting(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_w", "usd", 0)
	s.post(credits("acct_w", 150, 0)...)
	var before []int64
	rows, err := s.pool.Query(t.Context(), `SELECT id FROM ledger WHERE account_id = 'acct_w'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		before = append(before, id)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}

	stop := make(chan struct{})
	postErr := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				postErr <- nil
				return
			default:
			}
			if err := postAll(s.pool, credits("acct_w", 2, 1000+2*i)); err != nil {
				postErr <- err
				return
			}
		}
	})
	walked, _ := walkEntries(s, "acct_w", 7)
	seen := map[int64]int{}
	for _, id := range walked {
		seen[id]++
	}
	close(stop)
	wg.Wait()
	if err := <-postErr; err != nil {
		t.Fatal(err)
	}

	for _, id := range before {
		if seen[id] != 1 {
			t.Fatalf("pre-existing entry %d seen %d times", id, seen[id])
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("entry %d seen %d times", id, n)
		}
	}
	if posted := s.count(`SELECT count(*) FROM ledger WHERE account_id = 'acct_w'`); posted <= int64(len(before)) {
		t.Fatalf("nothing was posted during the walk (%d entries): the test proved nothing", posted)
	}
}
