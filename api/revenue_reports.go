package api

import (
	"encoding/csv"
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/mux"

	"github.com/onceledger/onceledger/db"
)

// Revenue reports and period close (SPEC §19, docs/finance.md).

// revenueAmountJSON is one line of the liability report.
type revenueAmountJSON struct {
	Amount             int64 `json:"amount"`
	PaidCredits        int64 `json:"paid_credits"`
	PromotionalCredits int64 `json:"promotional_credits"`
}

type currencyLiabilityJSON struct {
	Currency        string            `json:"currency"`
	OpeningDeferred revenueAmountJSON `json:"opening_deferred"`
	Purchased       revenueAmountJSON `json:"purchased"`
	Recognised      revenueAmountJSON `json:"recognised"`
	Breakage        revenueAmountJSON `json:"breakage"`
	Refunded        revenueAmountJSON `json:"refunded"`
	Disputed        revenueAmountJSON `json:"disputed"`
	Restored        revenueAmountJSON `json:"restored"`
	ClosingDeferred revenueAmountJSON `json:"closing_deferred"`
}

type liabilityReportJSON struct {
	From       time.Time               `json:"from"`
	To         time.Time               `json:"to"`
	Period     *string                 `json:"period"`
	Currencies []currencyLiabilityJSON `json:"currencies"`
}

func liabilityOut(r db.LiabilityReport) liabilityReportJSON {
	out := liabilityReportJSON{From: r.From, To: r.To, Period: orNull(r.Period), Currencies: make([]currencyLiabilityJSON, len(r.Currencies))}
	for i, c := range r.Currencies {
		line := func(name string) revenueAmountJSON {
			a := c.Line(name)
			return revenueAmountJSON{Amount: a.Amount, PaidCredits: a.PaidCredits, PromotionalCredits: a.PromotionalCredits}
		}
		out.Currencies[i] = currencyLiabilityJSON{
			Currency: c.Currency, OpeningDeferred: line("opening_deferred"), Purchased: line("purchased"),
			Recognised: line("recognised"), Breakage: line("breakage"), Refunded: line("refunded"),
			Disputed: line("disputed"), Restored: line("restored"), ClosingDeferred: line("closing_deferred"),
		}
	}
	return out
}

// reportRange reads a report's ?from= (inclusive) and ?to= (exclusive), RFC 3339, to not before from.
func reportRange(r *http.Request) (from, to time.Time, err error) {
	if from, err = timeQuery(r, "from"); err != nil {
		return
	}
	if to, err = timeQuery(r, "to"); err != nil {
		return
	}
	if to.Before(from) {
		err = badRequest("invalid_to", "to must not be before from")
	}
	return
}

// handleGetLiability answers the deferred-revenue rollforward from ?from= to ?to=, per currency, as JSON or
// (Accept: text/csv, ?format=csv) CSV. A range that is exactly a closed month answers its stored report,
// with its digest in Report-Digest.
func handleGetLiability(d Deps) http.Handler {
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		from, to, err := reportRange(r)
		if err != nil {
			return err
		}
		asCSV, err := wantsCSV(r)
		if err != nil {
			return err
		}
		report, err := db.LiabilityReportOf(r.Context(), d.Pool, from, to)
		if err != nil {
			return err
		}
		if report.Digest != "" {
			w.Header().Set("Report-Digest", report.Digest)
		}
		if asCSV {
			w.Header().Set("Content-Type", "text/csv; charset=utf-8")
			w.WriteHeader(http.StatusOK)
			_, err := w.Write(report.CSV())
			return err
		}
		writeJSON(w, http.StatusOK, liabilityOut(report))
		return nil
	})
}

// journalMaxRange is the longest journal one request may ask for.
const journalMaxRange = 366 * 24 * time.Hour

// journalCSVHeader is the header row of the journal.
var journalCSVHeader = []string{"date", "account", "debit_account", "credit_account", "amount", "currency", "entry_id", "kind"}

// handleGetJournal answers the revenue journal from ?from= to ?to= (at most a year) as CSV: one line per
// purchase, recognition, breakage, refund, dispute and restore, each a debit and a credit of the same
// amount between the general-ledger accounts the configuration names. It is streamed as it is read, a
// page at a time; a failure after the first byte cuts the connection, so a truncated journal is never
// mistaken for a whole one.
func handleGetJournal(d Deps) http.Handler {
	names := d.Config.Journal.OrDefaults()
	books := map[string][2]string{
		"purchase":       {names.Cash, names.DeferredRevenue},
		"recognised":     {names.DeferredRevenue, names.Revenue},
		"breakage":       {names.DeferredRevenue, names.Breakage},
		"refunded":       {names.DeferredRevenue, names.Refunds},
		"disputed":       {names.DeferredRevenue, names.Chargebacks},
		"refund_restore": {names.Refunds, names.DeferredRevenue},
		"dispute_won":    {names.Chargebacks, names.DeferredRevenue},
	}
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		from, to, err := reportRange(r)
		if err != nil {
			return err
		}
		if to.Sub(from) > journalMaxRange {
			return badRequest("invalid_to", "to must be at most a year (366 days) after from")
		}
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		out := csv.NewWriter(w)
		progress := newProgress(w)
		err = out.Write(journalCSVHeader)
		if err == nil {
			err = db.JournalLines(r.Context(), d.Pool, from, to, func(l db.JournalLine) error {
				progress.entryWritten()
				book := books[l.Kind]
				return out.Write([]string{
					l.At.UTC().Format(time.DateOnly), csvText(l.AccountID), csvText(book[0]), csvText(book[1]),
					strconv.FormatInt(l.Amount, 10), l.Currency, strconv.FormatInt(l.EntryID, 10), l.Kind,
				})
			})
		}
		if err == nil {
			out.Flush()
			err = out.Error()
		}
		if err != nil {
			d.Log.ErrorContext(r.Context(), "journal cut short", "err", err)
			panic(http.ErrAbortHandler)
		}
		return nil
	})
}

// handleClosePeriod closes the month {period} (YYYY-MM): its liability report is stored with its SHA-256,
// answered as CSV with the digest in Report-Digest. Closing it again answers what was stored (200 both
// times). The current or a later month: 400 period_open.
func handleClosePeriod(d Deps) http.Handler {
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		month, ok := db.MonthOf(mux.Vars(r)["period"])
		if !ok {
			return badRequest("invalid_period", "period must be a month: YYYY-MM")
		}
		if err := decodeOptionalJSON(w, r, &struct{}{}); err != nil {
			return err
		}
		closed, err := db.ClosePeriod(r.Context(), d.Pool, month)
		if err != nil {
			return err
		}
		w.Header().Set("Report-Digest", closed.Digest)
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		_, err = w.Write(closed.CSV)
		return err
	})
}

// periodsListed bounds GET /v1/periods: ten years of months.
const periodsListed = 120

// handleListPeriods answers the closed months, latest first, with their digests.
func handleListPeriods(d Deps) http.Handler {
	type periodJSON struct {
		Period   string    `json:"period"`
		ClosedAt time.Time `json:"closed_at"`
		Digest   string    `json:"digest"`
	}
	type response struct {
		Periods []periodJSON `json:"periods"`
	}
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		periods, err := db.ListPeriods(r.Context(), d.Pool, periodsListed)
		if err != nil {
			return err
		}
		out := response{Periods: make([]periodJSON, len(periods))}
		for i, p := range periods {
			out.Periods[i] = periodJSON{Period: p.Period, ClosedAt: p.ClosedAt, Digest: p.Digest}
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}
