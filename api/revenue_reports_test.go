package api

import (
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/config"
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

// account creates an account (no grant) through the ledger.
func (s *server) account(id, currency string) {
	s.t.Helper()
	if _, err := db.NewLedger(s.pool, db.LedgerConfig{}).CreateAccount(context.Background(), id, currency, 0); err != nil {
		s.t.Fatal(err)
	}
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
	s.account("acct_close", "usd")
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

// workedExample runs the steps of docs/finance.md's worked example, in the current month.
func (s *server) workedExample() {
	s.t.Helper()
	usd := func(n int64) *db.Cost { return &db.Cost{Amount: n, Currency: "usd"} }
	s.account("acct_ada", "usd")
	s.account("acct_bea", "eur")
	// 1. Ada buys 10,000 credits for $50.00 and is granted 1,000 promotional credits.
	s.postEntry(db.Posting{AccountID: "acct_ada", Kind: db.KindTopup, Amount: 10000, DedupeKey: "ex:topup:1", PaymentIntent: "pi_ada_1", Cost: usd(5000)})
	s.postEntry(db.Posting{AccountID: "acct_ada", Kind: db.KindGrant, Amount: 1000, DedupeKey: "ex:grant"})
	// 2. She uses 4,000: the grant first (promotional before paid), then 3,000 of the paid lot.
	s.postEntry(db.Posting{AccountID: "acct_ada", Kind: db.KindUsage, Amount: -4000, DedupeKey: "ex:usage:1"})
	// 3. 2,000 of her payment are refunded, then the refund is reversed (restored).
	s.postEntry(db.Posting{AccountID: "acct_ada", Kind: db.KindRefund, Amount: -2000, DedupeKey: "ex:refund", PaymentIntent: "pi_ada_1"})
	s.postEntry(db.Posting{AccountID: "acct_ada", Kind: db.KindRefundRestore, Amount: 2000, DedupeKey: "ex:refund:restore", PaymentIntent: "pi_ada_1", Reverses: "ex:refund"})
	// 4. She buys 2,000 more for $8.00; that lot is voided unused.
	second := s.postEntry(db.Posting{AccountID: "acct_ada", Kind: db.KindTopup, Amount: 2000, DedupeKey: "ex:topup:2", PaymentIntent: "pi_ada_2", Cost: usd(800)})
	var lot int64
	if err := s.pool.QueryRow(context.Background(), `SELECT id FROM credit_lots WHERE account_id = 'acct_ada' AND entry_id = $1`, second).Scan(&lot); err != nil {
		s.t.Fatal(err)
	}
	if _, err := db.NewLedger(s.pool, db.LedgerConfig{}).VoidLot(context.Background(), lot); err != nil {
		s.t.Fatal(err)
	}
	// 5. Bea buys 3,000 credits for €9.99, uses 1,000, and disputes 500 of her payment.
	s.postEntry(db.Posting{AccountID: "acct_bea", Kind: db.KindTopup, Amount: 3000, DedupeKey: "ex:topup:3", PaymentIntent: "pi_bea", Cost: &db.Cost{Amount: 999, Currency: "eur"}})
	s.postEntry(db.Posting{AccountID: "acct_bea", Kind: db.KindUsage, Amount: -1000, DedupeKey: "ex:usage:2"})
	s.postEntry(db.Posting{AccountID: "acct_bea", Kind: db.KindDispute, Amount: -500, DedupeKey: "ex:dispute", PaymentIntent: "pi_bea"})
}

// exampleTable reads the worked example's table from docs/finance.md: the report's CSV, as a table.
func exampleTable(t *testing.T) map[string][3]int64 {
	t.Helper()
	doc, err := os.ReadFile("../docs/finance.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "<!-- worked example: the liability report -->")
	if table, _, ok2 := strings.Cut(table, "<!-- end -->"); ok && ok2 {
		var csvText strings.Builder
		for _, line := range strings.Split(strings.TrimSpace(table), "\n") {
			cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
			if strings.HasPrefix(strings.TrimSpace(cells[0]), "-") {
				continue
			}
			for i := range cells {
				cells[i] = strings.ReplaceAll(strings.Trim(strings.TrimSpace(cells[i]), "`"), ",", "")
			}
			csvText.WriteString(strings.Join(cells, ",") + "\n")
		}
		return liabilityLines(t, []byte(csvText.String()))
	}
	t.Fatal("docs/finance.md has no worked example table")
	return nil
}

// The liability report of the worked example in docs/finance.md equals the table there, computed by hand,
// to the cent, as CSV and as JSON; and it ties: closing = opening + purchased − recognised − breakage −
// refunded − disputed + restored, in money and in credits of each category.
func TestLiabilityReportOfTheWorkedExample(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.workedExample()
	from := s.thisMonth()
	to := from.AddDate(0, 1, 0)
	want := exampleTable(t)
	if len(want) != 16 {
		t.Fatalf("the doc's table has %d lines, want 8 per currency for usd and eur", len(want))
	}

	report := s.call(http.MethodGet, "/v1/reports/liability"+rangeQuery(from, to), nil, "Accept", "text/csv", "Authorization", "Bearer "+readAPIKey).
		want(t, http.StatusOK, "")
	got := liabilityLines(t, report.Body)
	if len(got) != len(want) {
		t.Errorf("the report has %d lines, the doc %d:\n%s", len(got), len(want), report.Body)
	}
	wantLines(t, "CSV", got, want)

	asJSON := s.call(http.MethodGet, "/v1/reports/liability"+rangeQuery(from, to), nil).want(t, http.StatusOK, "")
	for _, c := range asJSON.JSON["currencies"].([]any) {
		c := c.(map[string]any)
		for _, line := range db.ReportLines {
			a := c[line].(map[string]any)
			n := [3]int64{int64(a["amount"].(float64)), int64(a["paid_credits"].(float64)), int64(a["promotional_credits"].(float64))}
			if w := want[c["currency"].(string)+" "+line]; n != w {
				t.Errorf("JSON %s %s = %v, want %v", c["currency"], line, n, w)
			}
		}
	}

	for _, currency := range []string{"usd", "eur"} {
		for i := range 3 {
			l := func(line string) int64 { return got[currency+" "+line][i] }
			rolled := l("opening_deferred") + l("purchased") - l("recognised") - l("breakage") - l("refunded") - l("disputed") + l("restored")
			if rolled != l("closing_deferred") {
				t.Errorf("%s column %d does not tie: opening and movements give %d, closing is %d", currency, i, rolled, l("closing_deferred"))
			}
		}
	}
}

// The journal of the worked example: every line is a debit and a credit of one amount, so debits equal
// credits per currency; its lines, summed by kind, are the report's measures; and what it books to
// Deferred revenue is the change of the report's deferred balance. The account names are the
// configuration's. A range beyond a year is refused, naming to.
func TestJournalBalancesAndMatchesTheReport(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) { c.Journal.Revenue = "4000 Sales" })
	s.workedExample()
	from := s.thisMonth()
	to := from.AddDate(0, 1, 0)
	report := liabilityLines(t, s.call(http.MethodGet, "/v1/reports/liability"+rangeQuery(from, to)+"&format=csv", nil).want(t, http.StatusOK, "").Body)

	journal := s.call(http.MethodGet, "/v1/reports/journal"+rangeQuery(from, to), nil, "Authorization", "Bearer "+readAPIKey).want(t, http.StatusOK, "")
	rows, err := csv.NewReader(strings.NewReader(string(journal.Body))).ReadAll()
	if err != nil || strings.Join(rows[0], ",") != "date,account,debit_account,credit_account,amount,currency,entry_id,kind" {
		t.Fatalf("not a journal (%v):\n%s", err, journal.Body)
	}
	byKind := map[string]int64{}
	booked := map[string]int64{} // currency and GL account → credits − debits
	for _, r := range rows[1:] {
		amount, err := strconv.ParseInt(r[4], 10, 64)
		if err != nil || amount <= 0 || r[2] == "" || r[3] == "" || r[2] == r[3] {
			t.Fatalf("journal line %v: want a positive amount between two accounts", r)
		}
		byKind[r[5]+" "+r[7]] += amount
		booked[r[5]+" "+r[2]] -= amount
		booked[r[5]+" "+r[3]] += amount
	}
	for _, currency := range []string{"usd", "eur"} {
		var net int64
		for key, n := range booked {
			if strings.HasPrefix(key, currency+" ") {
				net += n
			}
		}
		if net != 0 {
			t.Errorf("%s: debits and credits differ by %d", currency, net)
		}
		for kind, line := range map[string]string{"purchase": "purchased", "recognised": "recognised", "breakage": "breakage", "refunded": "refunded", "disputed": "disputed"} {
			if byKind[currency+" "+kind] != report[currency+" "+line][0] {
				t.Errorf("%s: the journal's %s lines sum to %d, the report's %s is %d", currency, kind, byKind[currency+" "+kind], line, report[currency+" "+line][0])
			}
		}
		if restored := byKind[currency+" refund_restore"] + byKind[currency+" dispute_won"]; restored != report[currency+" restored"][0] {
			t.Errorf("%s: the journal's restores sum to %d, the report's restored is %d", currency, restored, report[currency+" restored"][0])
		}
		deferred := report[currency+" closing_deferred"][0] - report[currency+" opening_deferred"][0]
		if booked[currency+" Deferred revenue"] != deferred {
			t.Errorf("%s: the journal books %d to Deferred revenue, the report's deferred moved %d", currency, booked[currency+" Deferred revenue"], deferred)
		}
	}
	if booked["usd 4000 Sales"] != report["usd recognised"][0] || booked["usd Revenue"] != 0 {
		t.Errorf("recognised revenue booked to %v, want the configured 4000 Sales", booked)
	}

	s.call(http.MethodGet, "/v1/reports/journal"+rangeQuery(from, from.AddDate(1, 0, 2)), nil).want(t, http.StatusBadRequest, "invalid_to")
	s.call(http.MethodGet, "/v1/reports/journal"+rangeQuery(from, from.AddDate(0, 0, -1)), nil).want(t, http.StatusBadRequest, "invalid_to")
	s.call(http.MethodGet, "/v1/reports/journal?from=yesterday&to="+url.QueryEscape(to.Format(time.RFC3339)), nil).want(t, http.StatusBadRequest, "invalid_from")
	s.call(http.MethodGet, "/v1/reports/liability?from="+url.QueryEscape(from.Format(time.RFC3339)), nil).want(t, http.StatusBadRequest, "invalid_to")
	s.call(http.MethodGet, "/v1/reports/liability"+rangeQuery(from, to)+"&format=xml", nil).want(t, http.StatusBadRequest, "invalid_format")
}

// Closing one month from many requests at once closes it once: every request answers the same report
// and digest, one row is stored, and one request's audit record says ok (the others are replays).
func TestConcurrentClosesCloseOnce(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.account("acct_race", "usd")
	s.postEntry(db.Posting{AccountID: "acct_race", Kind: db.KindTopup, Amount: 500, DedupeKey: "race:topup", Cost: &db.Cost{Amount: 250, Currency: "usd"}})
	last := s.thisMonth().AddDate(0, -1, 0)
	s.exec(`UPDATE credit_lots SET created_at = $1 WHERE account_id = 'acct_race'`, last.AddDate(0, 0, 9))

	const racers = 8
	digests := make(chan string, racers)
	var wg sync.WaitGroup
	for range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := s.call(http.MethodPost, "/v1/periods/"+last.Format("2006-01")+"/close", nil)
			if r.Status != http.StatusOK {
				t.Errorf("a racing close answered %d %s", r.Status, r.Body)
			}
			digests <- r.Header.Get("Report-Digest")
		}()
	}
	wg.Wait()
	close(digests)
	first := <-digests
	for d := range digests {
		if d != first {
			t.Fatalf("racing closes answered digests %s and %s", first, d)
		}
	}
	if n := s.count(`SELECT count(*) FROM revenue_periods`); n != 1 {
		t.Fatalf("%d closed periods stored, want 1", n)
	}
	if n := s.count(`SELECT count(*) FROM revenue_period_balances WHERE measure = 'purchased' AND amount = 250`); n != 1 {
		t.Fatalf("%d purchased totals of 250 stored, want 1", n)
	}
	if n := s.count(`SELECT count(*) FROM audit_log WHERE action = 'POST /v1/periods/{period}/close' AND outcome = 'ok'`); n != 1 {
		t.Fatalf("%d ok audit records, want 1", n)
	}
}
