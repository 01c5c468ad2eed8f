package api

import (
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db"
)

// thisMonth is the first instant of the database's current month (UTC): the open period.
func (s *server) thisMonth() time.Time {
	s.t.Helper()
	var m time.Time
	if err := s.pool.QueryRow(context.Background(), `SELECT date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'`).Scan(&m); err != nil {
		s.t.Fatal(err)
	}
	return m.UTC()
}

// rangeQuery is ?from=&to= for a report.
func rangeQuery(from, to time.Time) string {
	return "?from=" + url.QueryEscape(from.Format(time.RFC3339)) + "&to=" + url.QueryEscape(to.Format(time.RFC3339))
}

// postEntry posts one entry and returns its id.
func (s *server) postEntry(p db.Posting) int64 {
	s.t.Helper()
	var posted db.Posted
	err := db.InTx(context.Background(), s.pool, func(tx db.Tx) (err error) {
		posted, err = new(db.Ledger).Post(context.Background(), tx, p)
		return err
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return posted.Entry.ID
}

// exec runs a fixture statement.
func (s *server) exec(query string, args ...any) {
	s.t.Helper()
	if _, err := s.pool.Exec(context.Background(), query, args...); err != nil {
		s.t.Fatalf("%s: %v", query, err)
	}
}

// liabilityLines reads a liability report CSV as "currency line" → [amount, paid, promotional].
func liabilityLines(t *testing.T, body []byte) map[string][3]int64 {
	t.Helper()
	rows, err := csv.NewReader(strings.NewReader(string(body))).ReadAll()
	if err != nil || len(rows) == 0 || strings.Join(rows[0], ",") != "currency,line,amount,paid_credits,promotional_credits" {
		t.Fatalf("not a liability report CSV (%v):\n%s", err, body)
	}
	out := map[string][3]int64{}
	for _, r := range rows[1:] {
		var n [3]int64
		for i := range n {
			if n[i], err = strconv.ParseInt(r[2+i], 10, 64); err != nil {
				t.Fatal(err)
			}
		}
		out[r[0]+" "+r[1]] = n
	}
	return out
}

// wantLines fails the test unless every line named in want has these numbers.
func wantLines(t *testing.T, what string, got map[string][3]int64, want map[string][3]int64) {
	t.Helper()
	for line, w := range want {
		if got[line] != w {
			t.Errorf("%s: %s = %v, want %v", what, line, got[line], w)
		}
	}
}

// A closed month's report never changes. November is closed with a purchase and a recognition dated in it;
// its stored CSV and digest answer every later request, while a purchase that reaches November after the
// close (a lot dated in it, as a transaction that began before the month ended and committed late would
// be) lands in December, which opens at November's stored closing. Closing again answers the stored report;
// the current month, a later one, an earlier one than a closed month and malformed months are refused and
// write nothing; a read key cannot close; the stored rows cannot be changed.
func TestClosedPeriodNeverChanges(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	ctx := context.Background()
	dec := s.thisMonth()
	nov, oct, jan := dec.AddDate(0, -1, 0), dec.AddDate(0, -2, 0), dec.AddDate(0, 1, 0)

	// 10,000 credits bought for $50.00 on the 5th of November; 3,000 used on the 20th ($15.00).
	s.createAccount("acct_close", "usd", 0)
	s.postEntry(db.Posting{AccountID: "acct_close", Kind: db.KindTopup, Amount: 10000, DedupeKey: "close:topup:1"})
	usage := s.postEntry(db.Posting{AccountID: "acct_close", Kind: db.KindUsage, Amount: -3000, DedupeKey: "close:usage:1"})
	s.exec(`UPDATE credit_lots SET cost_amount = 5000, cost_currency = 'usd', created_at = $1 WHERE account_id = 'acct_close'`, nov.AddDate(0, 0, 4))
	s.exec(`INSERT INTO revenue_recognitions (account_id, lot_id, entry_id, posting_entry_id, kind, credits, drawn_after, amount, currency, created_at)
		SELECT account_id, id, $1, $1, 'recognised', 3000, 3000, 1500, 'usd', $2 FROM credit_lots WHERE account_id = 'acct_close'`,
		usage, nov.AddDate(0, 0, 19))

	novLines := map[string][3]int64{
		"usd opening_deferred": {0, 0, 0}, "usd purchased": {5000, 10000, 0}, "usd recognised": {1500, 3000, 0},
		"usd breakage": {0, 0, 0}, "usd closing_deferred": {3500, 7000, 0},
	}
	open := s.call(http.MethodGet, "/v1/reports/liability"+rangeQuery(nov, dec), nil, "Accept", "text/csv").want(t, http.StatusOK, "")
	wantLines(t, "November, open", liabilityLines(t, open.Body), novLines)
	if open.Header.Get("Report-Digest") != "" {
		t.Fatalf("an open month's report has a digest: %q", open.Header.Get("Report-Digest"))
	}

	// Refused, and nothing written: the current month, a later one, malformed months; a read key.
	for period, code := range map[string]string{
		dec.Format("2006-01"): "period_open", jan.Format("2006-01"): "period_open",
		"2026-13": "invalid_period", "26-11": "invalid_period", "2026-1": "invalid_period", "november": "invalid_period",
	} {
		s.call(http.MethodPost, "/v1/periods/"+period+"/close", nil).want(t, http.StatusBadRequest, code)
	}
	s.call(http.MethodPost, "/v1/periods/"+nov.Format("2006-01")+"/close", nil, "Authorization", "Bearer "+readAPIKey).
		want(t, http.StatusForbidden, "insufficient_scope")
	if n := s.count(`SELECT count(*) FROM revenue_periods`) + s.count(`SELECT count(*) FROM revenue_period_balances`); n != 0 {
		t.Fatalf("refused closes wrote %d rows", n)
	}

	closed := s.call(http.MethodPost, "/v1/periods/"+nov.Format("2006-01")+"/close", nil).want(t, http.StatusOK, "")
	sum := sha256.Sum256(closed.Body)
	digest := closed.Header.Get("Report-Digest")
	if digest != hex.EncodeToString(sum[:]) || string(closed.Body) != string(open.Body) {
		t.Fatalf("close answered digest %s of\n%s\nwant the SHA-256 %x of the open report\n%s", digest, closed.Body, sum, open.Body)
	}
	again := s.call(http.MethodPost, "/v1/periods/"+nov.Format("2006-01")+"/close", nil).want(t, http.StatusOK, "")
	if again.Header.Get("Report-Digest") != digest || string(again.Body) != string(closed.Body) {
		t.Fatalf("closing again answered %s\n%s", again.Header.Get("Report-Digest"), again.Body)
	}
	if n := s.count(`SELECT count(*) FROM audit_log WHERE action = 'POST /v1/periods/{period}/close' AND outcome = 'ok' AND target_id = $1`, nov.Format("2006-01")); n != 1 {
		t.Fatalf("%d ok audit records of the close, want 1 (the second close is a replay)", n)
	}
	s.call(http.MethodPost, "/v1/periods/"+oct.Format("2006-01")+"/close", nil).want(t, http.StatusConflict, "period_out_of_order")

	// More activity: a second purchase ($10.00 for 2,000 credits) reaches November after its close.
	s.postEntry(db.Posting{AccountID: "acct_close", Kind: db.KindTopup, Amount: 2000, DedupeKey: "close:topup:2"})
	s.exec(`UPDATE credit_lots SET cost_amount = 1000, cost_currency = 'usd', created_at = $1 WHERE account_id = 'acct_close' AND amount = 2000`, nov.AddDate(0, 0, 27))

	for _, format := range []string{"csv", "json"} {
		later := s.call(http.MethodGet, "/v1/reports/liability"+rangeQuery(nov, dec)+"&format="+format, nil).want(t, http.StatusOK, "")
		if later.Header.Get("Report-Digest") != digest {
			t.Fatalf("November (%s) now answers digest %q, want %s", format, later.Header.Get("Report-Digest"), digest)
		}
		if format == "csv" && string(later.Body) != string(closed.Body) {
			t.Fatalf("November's report changed after its close:\n%s\nwas\n%s", later.Body, closed.Body)
		}
		if format == "json" {
			usd := later.JSON["currencies"].([]any)[0].(map[string]any)
			if later.JSON["period"] != nov.Format("2006-01") || usd["closing_deferred"].(map[string]any)["amount"] != 3500.0 {
				t.Fatalf("November as JSON: %s", later.Body)
			}
		}
	}
	decReport := s.call(http.MethodGet, "/v1/reports/liability"+rangeQuery(dec, jan), nil, "Accept", "text/csv").want(t, http.StatusOK, "")
	wantLines(t, "December", liabilityLines(t, decReport.Body), map[string][3]int64{
		"usd opening_deferred": {3500, 7000, 0}, "usd purchased": {1000, 2000, 0}, "usd recognised": {0, 0, 0},
		"usd closing_deferred": {4500, 9000, 0},
	})

	list := s.call(http.MethodGet, "/v1/periods", nil, "Authorization", "Bearer "+readAPIKey).want(t, http.StatusOK, "")
	periods := list.JSON["periods"].([]any)
	if len(periods) != 1 || periods[0].(map[string]any)["period"] != nov.Format("2006-01") || periods[0].(map[string]any)["digest"] != digest {
		t.Fatalf("GET /v1/periods: %s", list.Body)
	}

	for _, tamper := range []string{
		`UPDATE revenue_periods SET report_csv = 'x'`, `DELETE FROM revenue_period_balances`, `TRUNCATE revenue_periods CASCADE`,
	} {
		if _, err := s.pool.Exec(ctx, tamper); !errors.Is(db.MapError(err), db.ErrPeriodFrozen) {
			t.Fatalf("%s: %v, want refused by revenue_periods_frozen", tamper, err)
		}
	}
}
