package api

import (
	"context"
	"encoding/csv"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db"
)

// dbNow is the database's clock, which stamps entries (clock_timestamp()).
func (s *server) dbNow() time.Time {
	s.t.Helper()
	var now time.Time
	if err := s.pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now); err != nil {
		s.t.Fatal(err)
	}
	return now
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// historyFixture posts 10, 20, 30 before t1, then -5, 7, -2 before t2, then 100 after it.
func historyFixture(s *server, account string) (t0, t1, t2 time.Time) {
	s.t.Helper()
	s.createAccount(account, "usd", 0)
	adjust := func(amounts ...int64) {
		for _, amount := range amounts {
			s.post(db.Posting{AccountID: account, Kind: db.KindAdjustment, Amount: amount})
		}
	}
	t0 = s.dbNow()
	adjust(10, 20, 30)
	t1 = s.dbNow()
	adjust(-5, 7, -2)
	t2 = s.dbNow()
	adjust(100)
	return t0, t1, t2
}

func TestBalanceAtBeforeBetweenAndAfterEntries(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	t0, t1, t2 := historyFixture(s, "acct_at")
	for _, c := range []struct {
		at   time.Time
		want int64
	}{
		{t0, 0}, {t1, 60}, {t2, 60}, {t2.Add(time.Hour), 160},
	} {
		got := s.call(http.MethodGet, "/v1/accounts/acct_at/balance?at="+url.QueryEscape(rfc3339(c.at)), nil).want(t, http.StatusOK, "")
		if b := int64(got.JSON["balance"].(float64)); b != c.want || got.JSON["account_id"] != "acct_at" {
			t.Fatalf("balance at %s = %s, want %d", rfc3339(c.at), got.Body, c.want)
		}
	}
	// Exactly at an entry's created_at, that entry counts.
	var last time.Time
	if err := s.pool.QueryRow(context.Background(), `SELECT created_at FROM ledger WHERE account_id = 'acct_at' AND seq = 6`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	got := s.call(http.MethodGet, "/v1/accounts/acct_at/balance?at="+url.QueryEscape(rfc3339(last)), nil).want(t, http.StatusOK, "")
	if b := int64(got.JSON["balance"].(float64)); b != 60 {
		t.Fatalf("balance at the last entry's own time = %d, want 60", b)
	}

	s.call(http.MethodGet, "/v1/accounts/acct_at/balance", nil).want(t, http.StatusBadRequest, "invalid_at")
	s.call(http.MethodGet, "/v1/accounts/acct_at/balance?at=yesterday", nil).want(t, http.StatusBadRequest, "invalid_at")
	s.call(http.MethodGet, "/v1/accounts/acct_nobody/balance?at="+url.QueryEscape(rfc3339(t1)), nil).want(t, http.StatusNotFound, "account_not_found")
}

func TestStatementOpeningPlusEntriesIsClosing(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	t0, t1, t2 := historyFixture(s, "acct_stmt")
	query := func(from, to time.Time) string {
		return "/v1/accounts/acct_stmt/statement?" + url.Values{"from": {rfc3339(from)}, "to": {rfc3339(to)}}.Encode()
	}
	for _, c := range []struct {
		from, to         time.Time
		opening, closing int64
		seqs             string
	}{
		{t0, t1, 0, 60, "[1 2 3]"},
		{t1, t2, 60, 60, "[4 5 6]"},
		{t0, t2.Add(time.Hour), 0, 160, "[1 2 3 4 5 6 7]"},
		{t2.Add(time.Hour), t2.Add(2 * time.Hour), 160, 160, "[]"},
		{t1, t1, 60, 60, "[]"},
	} {
		got := s.call(http.MethodGet, query(c.from, c.to), nil).want(t, http.StatusOK, "")
		opening, closing := int64(got.JSON["opening_balance"].(float64)), int64(got.JSON["closing_balance"].(float64))
		var seqs []int64
		running := opening
		for _, raw := range got.JSON["entries"].([]any) {
			e := raw.(map[string]any)
			running += int64(e["amount"].(float64))
			if after := int64(e["balance_after"].(float64)); after != running {
				t.Fatalf("entry %v: balance_after %d, want %d", e["seq"], after, running)
			}
			seqs = append(seqs, int64(e["seq"].(float64)))
		}
		if opening != c.opening || closing != c.closing || running != closing || fmt.Sprint(seqs) != c.seqs {
			t.Fatalf("statement %s..%s: opening %d closing %d (entries sum to %d), seqs %v; want %d, %d, %s",
				rfc3339(c.from), rfc3339(c.to), opening, closing, running, seqs, c.opening, c.closing, c.seqs)
		}
		if got.JSON["currency"] != "usd" || got.JSON["account_id"] != "acct_stmt" {
			t.Fatalf("statement head: %s", got.Body)
		}
	}

	for _, bad := range []struct{ query, code string }{
		{"to=" + url.QueryEscape(rfc3339(t1)), "invalid_from"},
		{"from=" + url.QueryEscape(rfc3339(t1)), "invalid_to"},
		{"from=2026-11-01&to=2026-12-01", "invalid_from"},
		{"from=" + url.QueryEscape(rfc3339(t2)) + "&to=" + url.QueryEscape(rfc3339(t1)), "invalid_to"},
		{"from=" + url.QueryEscape(rfc3339(t1)) + "&to=" + url.QueryEscape(rfc3339(t2)) + "&format=xml", "invalid_format"},
	} {
		s.call(http.MethodGet, "/v1/accounts/acct_stmt/statement?"+bad.query, nil).want(t, http.StatusBadRequest, bad.code)
	}
	s.call(http.MethodGet, "/v1/accounts/acct_nobody/statement?"+url.Values{"from": {rfc3339(t0)}, "to": {rfc3339(t2)}}.Encode(), nil).
		want(t, http.StatusNotFound, "account_not_found")
}

func TestStatementAsCSV(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	_, t1, t2 := historyFixture(s, "acct_csv")
	period := url.Values{"from": {rfc3339(t1)}, "to": {rfc3339(t2)}}.Encode()
	for name, call := range map[string]func() reply{
		"format=csv": func() reply {
			return s.call(http.MethodGet, "/v1/accounts/acct_csv/statement?format=csv&"+period, nil)
		},
		"Accept": func() reply {
			return s.call(http.MethodGet, "/v1/accounts/acct_csv/statement?"+period, nil, "Accept", "text/csv")
		},
	} {
		got := call().want(t, http.StatusOK, "")
		if got.Header.Get("Statement-Opening-Balance") != "60" || got.Header.Get("Statement-Closing-Balance") != "60" ||
			!strings.HasPrefix(got.Header.Get("Content-Type"), "text/csv") {
			t.Fatalf("%s: headers %v", name, got.Header)
		}
		rows, err := csv.NewReader(strings.NewReader(string(got.Body))).ReadAll()
		if err != nil {
			t.Fatalf("%s: %v in %s", name, err, got.Body)
		}
		if len(rows) != 4 || strings.Join(rows[0], ",") != "seq,id,created_at,kind,amount,balance_after,dedupe_key,description,subject,feature" {
			t.Fatalf("%s: rows %v", name, rows)
		}
		running := int64(60)
		for i, row := range rows[1:] {
			amount, _ := strconv.ParseInt(row[4], 10, 64)
			running += amount
			if row[0] != strconv.Itoa(4+i) || row[3] != "adjustment" || row[5] != strconv.FormatInt(running, 10) {
				t.Fatalf("%s: row %v, want seq %d with balance_after %d", name, row, 4+i, running)
			}
			if _, err := time.Parse(time.RFC3339Nano, row[2]); err != nil {
				t.Fatalf("%s: created_at %q: %v", name, row[2], err)
			}
		}
	}
}

// A CSV statement opened in a spreadsheet runs no formula: a text cell (description, dedupe key) that
// starts with = + - @, a tab or a carriage return is written with a leading apostrophe, which
// spreadsheets read as "this is text"; numbers, negative amounts included, stay numbers.
func TestStatementCSVNeutralisesFormulas(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.createAccount("acct_formula", "usd", 0)
	t0 := s.dbNow()
	texts := []string{`=HYPERLINK("http://evil.example","x")`, "+1+2", "-2+3", "@SUM(A1)", "\tcell", "\rcell", "plain = text"}
	for i, text := range texts {
		s.post(db.Posting{AccountID: "acct_formula", Kind: db.KindAdjustment, Amount: int64(-1 - i), Description: text, DedupeKey: text})
	}
	period := url.Values{"from": {rfc3339(t0)}, "to": {rfc3339(s.dbNow())}}.Encode()
	got := s.call(http.MethodGet, "/v1/accounts/acct_formula/statement?format=csv&"+period, nil).want(t, http.StatusOK, "")
	rows, err := csv.NewReader(strings.NewReader(string(got.Body))).ReadAll()
	if err != nil || len(rows) != len(texts)+1 {
		t.Fatalf("rows %v, %v", rows, err)
	}
	for i, row := range rows[1:] {
		want := texts[i]
		if i < len(texts)-1 {
			want = "'" + want
		}
		if amount := strconv.Itoa(-1 - i); row[4] != amount || row[6] != want || row[7] != want {
			t.Fatalf("row %v: want amount %s, dedupe key and description %q", row, amount, want)
		}
	}
}

func TestEntriesShowSeqAndBalanceAfter(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	historyFixture(s, "acct_list")
	got := s.call(http.MethodGet, "/v1/accounts/acct_list/entries", nil).want(t, http.StatusOK, "")
	var pairs []string
	for _, raw := range got.JSON["entries"].([]any) {
		e := raw.(map[string]any)
		pairs = append(pairs, fmt.Sprintf("%v:%v", e["seq"], e["balance_after"]))
	}
	if want := "[7:160 6:60 5:62 4:55 3:60 2:30 1:10]"; fmt.Sprint(pairs) != want {
		t.Fatalf("seq:balance_after newest first = %v, want %s", pairs, want)
	}
}
