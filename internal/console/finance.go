package console

import (
	"net/http"

	"github.com/onceledger/onceledger/db"
)

// financeLine is one line of a currency's rollforward, named as the report names it.
type financeLine struct {
	Name string
	db.RevenueAmount
}

type financeCurrency struct {
	Currency string
	Lines    []financeLine
}

type financePage struct {
	frame
	// Month is the open period, "YYYY-MM".
	Month      string
	Currencies []financeCurrency
	Periods    []db.ClosedPeriod
}

// periodsShown bounds the closed periods listed: two years of months.
const periodsShown = 24

// finance shows the open month's deferred-revenue rollforward per currency, as the liability report
// computes it, and the closed months with the digests of their stored reports (docs/finance.md).
func (c *Console) finance(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	report, err := db.OpenPeriodReport(ctx, c.Pool)
	if err != nil {
		return err
	}
	periods, err := db.ListPeriods(ctx, c.Pool, periodsShown)
	if err != nil {
		return err
	}
	p := &financePage{frame: c.frame(r, "Finance"), Month: report.From.Format("2006-01"), Periods: periods}
	for _, cur := range report.Currencies {
		fc := financeCurrency{Currency: cur.Currency}
		for i, name := range db.ReportLines {
			fc.Lines = append(fc.Lines, financeLine{Name: name, RevenueAmount: cur.Lines[i]})
		}
		p.Currencies = append(p.Currencies, fc)
	}
	c.render(w, r, http.StatusOK, "finance", p)
	return nil
}
