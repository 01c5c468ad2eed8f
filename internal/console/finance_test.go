package console_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
)

// The finance page in a real browser: the open month's rollforward per currency, as the liability report
// computes it (a $50.00 purchase of 10,000 credits, 3,000 used: $15.00 recognised, $35.00 deferred), and
// the closed months with their digests. A month is closed through the API (its lot dated in it), and
// the page lists it with the digest the close answered.
func TestConsoleFinanceInBrowser(t *testing.T) {
	t.Parallel()
	s := newConsoleServer(t)
	ctx := context.Background()
	ledger := dbtest.Ledger(t, s.pool)
	if _, err := ledger.CreateAccount(ctx, "acct_fin", "usd", 0); err != nil {
		t.Fatal(err)
	}
	// Last month: 1,000 credits bought for $4.00, dated in it; the month is then closed.
	post := func(p db.Posting) {
		t.Helper()
		if err := db.InTx(ctx, s.pool, func(tx db.Tx) error { _, err := ledger.Post(ctx, tx, p); return err }); err != nil {
			t.Fatal(err)
		}
	}
	post(db.Posting{AccountID: "acct_fin", Kind: db.KindTopup, Amount: 1000, DedupeKey: "fin:old", Cost: &db.Cost{Amount: 400, Currency: "usd"}})
	var lastMonth string
	var tenDaysBefore time.Time
	if err := s.pool.QueryRow(ctx, `SELECT date_trunc('month', now()) - interval '10 days'`).Scan(&tenDaysBefore); err != nil {
		t.Fatal(err)
	}
	lastMonth = tenDaysBefore.UTC().Format("2006-01")
	if _, err := s.pool.Exec(ctx, `UPDATE credit_lots SET created_at = $1 WHERE account_id = 'acct_fin'`, tenDaysBefore); err != nil {
		t.Fatal(err)
	}
	s.call(http.MethodPost, "/v1/periods/"+lastMonth+"/close", "", "")
	periods, err := db.ListPeriods(ctx, s.pool, 10)
	if err != nil || len(periods) != 1 {
		t.Fatalf("closed periods %v, %v", periods, err)
	}
	// This month: 10,000 credits for $50.00, 3,000 used.
	post(db.Posting{AccountID: "acct_fin", Kind: db.KindTopup, Amount: 10000, DedupeKey: "fin:new", PaymentIntent: "pi_fin", Cost: &db.Cost{Amount: 5000, Currency: "usd"}})
	post(db.Posting{AccountID: "acct_fin", Kind: db.KindUsage, Amount: -3000, DedupeKey: "fin:usage"})

	b := newBrowser(t)
	b.run(chromedp.Navigate(s.url+"/console/finance"), chromedp.WaitVisible(chromedp.CSS("#key")))
	b.run(chromedp.SendKeys(chromedp.CSS("#key"), opsKey))
	b.follow(chromedp.Submit(chromedp.CSS("#key")), `nav a[href="/console/finance"]`)
	b.follow(chromedp.Click(chromedp.CSS(`nav a[href="/console/finance"]`)), "#rollforward-usd")
	for line, want := range map[string]string{
		// The old lot is drawn first (lot order), so this month's usage recognises it whole, then 2,000 of the new.
		"opening_deferred": "opening_deferred\t400\t1,000\t0",
		"purchased":        "purchased\t5,000\t10,000\t0",
		"recognised":       "recognised\t1,400\t3,000\t0",
		"closing_deferred": "closing_deferred\t4,000\t8,000\t0",
	} {
		if got := b.text("#rollforward-usd tr.line-" + line); got != want {
			t.Errorf("the finance page shows %q, want %q", got, want)
		}
	}
	if got := b.text("#closed-periods tbody"); !strings.HasPrefix(got, lastMonth+"\t") || !strings.HasSuffix(got, periods[0].Digest) {
		t.Errorf("closed periods shown as %q, want %s with digest %s", got, lastMonth, periods[0].Digest)
	}
	b.screenshot("finance")
}
