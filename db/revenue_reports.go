package db

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// Revenue reports and period close (SPEC §19). The liability report is computed from the recognition rows
// and the lots by SQL aggregation, one row per currency and measure, whatever the number of entries; a
// closed month answers the report stored when it closed.

var (
	// ErrPeriodOpen: the month asked to close has not ended yet (the current month or a later one).
	ErrPeriodOpen = errors.New("the period has not ended yet")
	// ErrPeriodOutOfOrder: a later month is closed already; months close in order, so that each opens
	// where the one before it closed.
	ErrPeriodOutOfOrder = errors.New("a later period is closed already")
	// ErrPeriodFrozen: something tried to change or delete a closed period's stored report or totals
	// (revenue_periods_frozen).
	ErrPeriodFrozen = errors.New("a closed period never changes")
)

// RevenueAmount is one line of the liability report: money in the currency's minor units, and the credits
// it concerns, split by the category of their lots.
type RevenueAmount struct {
	Amount             int64
	PaidCredits        int64
	PromotionalCredits int64
}

func (a RevenueAmount) plus(b RevenueAmount) RevenueAmount {
	return RevenueAmount{a.Amount + b.Amount, a.PaidCredits + b.PaidCredits, a.PromotionalCredits + b.PromotionalCredits}
}

func (a RevenueAmount) minus(b RevenueAmount) RevenueAmount {
	return RevenueAmount{a.Amount - b.Amount, a.PaidCredits - b.PaidCredits, a.PromotionalCredits - b.PromotionalCredits}
}

// revenueMeasures are the measures that move deferred revenue, in the report's order; their cumulative
// totals are what a closed period stores (revenue_period_balances).
var revenueMeasures = []string{"purchased", "recognised", "breakage", "refunded", "disputed", "restored"}

// ReportLines are the liability report's lines, in order: opening_deferred, the measures, closing_deferred.
var ReportLines = append(append([]string{"opening_deferred"}, revenueMeasures...), "closing_deferred")

// revenueTotals are the cumulative totals of one currency, by measure (revenueMeasures' order).
type revenueTotals [6]RevenueAmount

// deferred is what is still owed in credits: purchased − recognised − breakage − refunded − disputed + restored.
func (t revenueTotals) deferred() RevenueAmount {
	d := t[0]
	for _, m := range t[1:5] {
		d = d.minus(m)
	}
	return d.plus(t[5])
}

// CurrencyLiability is the liability report of one currency: Lines in ReportLines' order. It ties by
// construction: closing = opening + purchased − recognised − breakage − refunded − disputed + restored.
type CurrencyLiability struct {
	Currency string
	Lines    [8]RevenueAmount
}

// Line returns the line named name (one of ReportLines).
func (c CurrencyLiability) Line(name string) RevenueAmount {
	return c.Lines[slices.Index(ReportLines, name)]
}

// LiabilityReport is the deferred-revenue rollforward from From (inclusive) to To (exclusive), per currency
// in alphabetical order. Period and Digest are set when it is a closed month's stored report.
type LiabilityReport struct {
	From, To   time.Time
	Currencies []CurrencyLiability
	Period     string
	Digest     string
}

// liabilityCSVHeader is the header row of the liability report's CSV: one row per currency and line.
var liabilityCSVHeader = []string{"currency", "line", "amount", "paid_credits", "promotional_credits"}

// CSV is the report as CSV, the form a closed period stores and digests: the header row, then for each
// currency its eight lines in order.
func (r LiabilityReport) CSV() []byte {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	_ = w.Write(liabilityCSVHeader)
	for _, c := range r.Currencies {
		for i, line := range ReportLines {
			a := c.Lines[i]
			_ = w.Write([]string{c.Currency, line, strconv.FormatInt(a.Amount, 10),
				strconv.FormatInt(a.PaidCredits, 10), strconv.FormatInt(a.PromotionalCredits, 10)})
		}
	}
	w.Flush()
	return buf.Bytes()
}

// parseLiabilityCSV reads back a report CSV wrote.
func parseLiabilityCSV(text string) ([]CurrencyLiability, error) {
	rows, err := csv.NewReader(bytes.NewReader([]byte(text))).ReadAll()
	if err != nil || len(rows) == 0 || !slices.Equal(rows[0], liabilityCSVHeader) || (len(rows)-1)%len(ReportLines) != 0 {
		return nil, fmt.Errorf("stored report is not a liability report CSV: %v", err)
	}
	var out []CurrencyLiability
	for i, row := range rows[1:] {
		line := i % len(ReportLines)
		if line == 0 {
			out = append(out, CurrencyLiability{Currency: row[0]})
		}
		var n [3]int64
		for j := range n {
			if n[j], err = strconv.ParseInt(row[2+j], 10, 64); err != nil {
				return nil, fmt.Errorf("stored report, row %d: %w", i+2, err)
			}
		}
		c := &out[len(out)-1]
		if row[0] != c.Currency || row[1] != ReportLines[line] {
			return nil, fmt.Errorf("stored report, row %d: %s %s out of place", i+2, row[0], row[1])
		}
		c.Lines[line] = RevenueAmount{n[0], n[1], n[2]}
	}
	return out, nil
}

// MonthOf returns the first instant (UTC) of the month "YYYY-MM", and whether s is one.
func MonthOf(s string) (time.Time, bool) {
	t, err := time.Parse("2006-01", s)
	if err != nil || t.Format("2006-01") != s {
		return time.Time{}, false
	}
	return t, true
}

// monthName is the month a period's date names, as "YYYY-MM".
func monthName(d pgtype.Date) string { return d.Time.Format("2006-01") }

func dateOf(t time.Time) pgtype.Date { return pgtype.Date{Time: t, Valid: true} }

// LiabilityReportOf returns the liability report from from (inclusive) to to (exclusive). A range that is
// exactly a closed month answers the report stored when it closed. Otherwise it is computed: at each
// bound, the cumulative totals of every measure up to it, those a closed month stored when the bound is
// that month's end, else those the recognition rows and lots hold now (one aggregation in SQL). So a
// period that opens where a closed one ended opens with what the closed one stored, and whatever reached a
// closed month after it closed (a transaction that committed late) is counted in the open period.
func LiabilityReportOf(ctx context.Context, q Conn, from, to time.Time) (LiabilityReport, error) {
	from, to = from.UTC(), to.UTC()
	out := LiabilityReport{From: from, To: to}
	if from.Day() == 1 && from.Equal(startOfMonth(from)) && to.Equal(from.AddDate(0, 1, 0)) {
		stored, err := dbsqlc.New(q).RevenuePeriodGet(ctx, dateOf(from))
		switch {
		case err == nil:
			if out.Currencies, err = parseLiabilityCSV(stored.ReportCsv); err != nil {
				return LiabilityReport{}, fmt.Errorf("closed period %s: %w", monthName(stored.Period), err)
			}
			out.Period, out.Digest = monthName(stored.Period), stored.Digest
			return out, nil
		case !isNoRows(err):
			return LiabilityReport{}, fmt.Errorf("closed period %s: %w", from.Format("2006-01"), MapError(err))
		}
	}
	opening, closing, _, err := revenueTotalsAt(ctx, q, from, to)
	if err != nil {
		return LiabilityReport{}, err
	}
	out.Currencies = rollforward(opening, closing)
	return out, nil
}

func startOfMonth(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// rollforward makes the report's lines of each currency from the cumulative totals at its two bounds.
func rollforward(opening, closing map[string]revenueTotals) []CurrencyLiability {
	var currencies []string
	for c := range closing {
		currencies = append(currencies, c)
	}
	for c := range opening {
		if _, ok := closing[c]; !ok {
			currencies = append(currencies, c)
		}
	}
	slices.Sort(currencies)
	out := make([]CurrencyLiability, len(currencies))
	for i, c := range currencies {
		open, close := opening[c], closing[c]
		out[i].Currency = c
		out[i].Lines[0] = open.deferred()
		for m := range revenueMeasures {
			out[i].Lines[1+m] = close[m].minus(open[m])
		}
		out[i].Lines[7] = close.deferred()
	}
	return out
}

// revenueTotalsAt returns the cumulative totals per currency at from and at to: a closed month's stored
// totals when the bound is its end, else the live aggregation; and the live totals at to.
func revenueTotalsAt(ctx context.Context, q Conn, from, to time.Time) (opening, closing, liveClosing map[string]revenueTotals, err error) {
	opening, closing, liveClosing = map[string]revenueTotals{}, map[string]revenueTotals{}, map[string]revenueTotals{}
	live, err := liveRevenueTotals(ctx, q, from, to)
	if err != nil {
		return nil, nil, nil, err
	}
	for c, t := range live {
		opening[c], closing[c], liveClosing[c] = t[0], t[1], t[1]
	}
	for _, bound := range []struct {
		at     time.Time
		totals map[string]revenueTotals
	}{{from, opening}, {to, closing}} {
		stored, ok, err := storedRevenueTotals(ctx, q, bound.at)
		if err != nil {
			return nil, nil, nil, err
		}
		if ok {
			clear(bound.totals)
			for c, t := range stored {
				bound.totals[c] = t
			}
		}
	}
	return opening, closing, liveClosing, nil
}

// storedRevenueTotals returns the totals the month ending at at stored when it closed, and whether that
// month is closed.
func storedRevenueTotals(ctx context.Context, q Conn, at time.Time) (map[string]revenueTotals, bool, error) {
	if !at.Equal(startOfMonth(at)) {
		return nil, false, nil
	}
	month := at.AddDate(0, -1, 0)
	queries := dbsqlc.New(q)
	if _, err := queries.RevenuePeriodGet(ctx, dateOf(month)); err != nil {
		if isNoRows(err) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("closed period %s: %w", month.Format("2006-01"), MapError(err))
	}
	rows, err := queries.RevenuePeriodBalancesOf(ctx, dateOf(month))
	if err != nil {
		return nil, false, fmt.Errorf("totals of closed period %s: %w", month.Format("2006-01"), MapError(err))
	}
	out := map[string]revenueTotals{}
	for _, r := range rows {
		t := out[r.Currency]
		t[slices.Index(revenueMeasures, r.Measure)] = RevenueAmount{r.Amount, r.PaidCredits, r.PromotionalCredits}
		out[r.Currency] = t
	}
	return out, true, nil
}

// liveRevenueTotals aggregates, in SQL, the cumulative totals of every currency and measure before from
// and before to, from the recognition rows and the lots as they are now.
func liveRevenueTotals(ctx context.Context, q Conn, from, to time.Time) (map[string][2]revenueTotals, error) {
	rows, err := dbsqlc.New(q).RevenueTotalsBefore(ctx, dbsqlc.RevenueTotalsBeforeParams{FromTime: from, ToTime: to})
	if err != nil {
		return nil, fmt.Errorf("revenue totals before %s and %s: %w", from.Format(time.RFC3339), to.Format(time.RFC3339), MapError(err))
	}
	out := map[string][2]revenueTotals{}
	for _, r := range rows {
		m := slices.Index(revenueMeasures, r.Measure)
		if m < 0 {
			return nil, fmt.Errorf("revenue totals: unknown measure %q", r.Measure)
		}
		t := out[r.Currency]
		t[0][m] = RevenueAmount{r.AmountFrom, r.PaidFrom, r.PromotionalFrom}
		t[1][m] = RevenueAmount{r.AmountTo, r.PaidTo, r.PromotionalTo}
		out[r.Currency] = t
	}
	return out, nil
}

// ClosedPeriod is a closed month: its stored report and digest. Closed says whether this call closed it
// (false: it was closed before, and this is what it stored).
type ClosedPeriod struct {
	Period   string
	ClosedAt time.Time
	CSV      []byte
	Digest   string
	Closed   bool
}

// ClosePeriod closes the month that starts at month (its first instant, UTC): in one transaction,
// serialised with every other close, it stores the month's liability report as CSV with its SHA-256, and
// the cumulative totals at the month's end, where the next period opens. A month already closed answers
// what it stored and writes nothing. ErrPeriodOpen when the month has not ended by the database's clock;
// ErrPeriodOutOfOrder when a later month is closed. The request's record (PendingAudit) commits with the
// close.
func ClosePeriod(ctx context.Context, b Beginner, month time.Time) (ClosedPeriod, error) {
	month = startOfMonth(month.UTC())
	var out ClosedPeriod
	err := InAuditedTx(ctx, b, func(tx Tx) (bool, error) {
		queries := dbsqlc.New(tx)
		if err := queries.RevenuePeriodsLock(ctx); err != nil {
			return false, fmt.Errorf("lock periods: %w", MapError(err))
		}
		stored, err := queries.RevenuePeriodGet(ctx, dateOf(month))
		if err == nil {
			out = ClosedPeriod{Period: monthName(stored.Period), ClosedAt: stored.ClosedAt, CSV: []byte(stored.ReportCsv), Digest: stored.Digest}
			return false, nil
		}
		if !isNoRows(err) {
			return false, fmt.Errorf("closed period %s: %w", month.Format("2006-01"), MapError(err))
		}
		now, err := queries.RevenuePeriodsClock(ctx)
		if err != nil {
			return false, fmt.Errorf("the database's time: %w", MapError(err))
		}
		end := month.AddDate(0, 1, 0)
		if now.Before(end) {
			return false, fmt.Errorf("%w: %s ends at %s", ErrPeriodOpen, month.Format("2006-01"), end.Format(time.RFC3339))
		}
		latest, err := queries.RevenuePeriodLatest(ctx)
		if err != nil {
			return false, fmt.Errorf("latest closed period: %w", MapError(err))
		}
		if latest.Valid && latest.Time.After(month) {
			return false, fmt.Errorf("%w: %s is closed", ErrPeriodOutOfOrder, monthName(latest))
		}
		opening, closing, live, err := revenueTotalsAt(ctx, tx, month, end)
		if err != nil {
			return false, err
		}
		report := LiabilityReport{From: month, To: end, Currencies: rollforward(opening, closing)}
		inserted, err := queries.RevenuePeriodInsert(ctx, dbsqlc.RevenuePeriodInsertParams{Period: dateOf(month), ReportCsv: string(report.CSV())})
		if err != nil {
			return false, fmt.Errorf("close period %s: %w", month.Format("2006-01"), MapError(err))
		}
		var p dbsqlc.RevenuePeriodBalancesInsertParams
		p.Period = dateOf(month)
		for c, t := range live {
			for m, measure := range revenueMeasures {
				a := t[m]
				p.Currencies, p.Measures = append(p.Currencies, c), append(p.Measures, measure)
				p.Amounts, p.PaidCredits = append(p.Amounts, a.Amount), append(p.PaidCredits, a.PaidCredits)
				p.PromotionalCredits = append(p.PromotionalCredits, a.PromotionalCredits)
			}
		}
		if err := queries.RevenuePeriodBalancesInsert(ctx, p); err != nil {
			return false, fmt.Errorf("store the totals of period %s: %w", month.Format("2006-01"), MapError(err))
		}
		out = ClosedPeriod{Period: monthName(inserted.Period), ClosedAt: inserted.ClosedAt, CSV: []byte(inserted.ReportCsv), Digest: inserted.Digest, Closed: true}
		return true, nil
	})
	return out, err
}

// ListPeriods returns the closed months, latest first, at most limit, without their reports.
func ListPeriods(ctx context.Context, q Conn, limit int32) ([]ClosedPeriod, error) {
	rows, err := dbsqlc.New(q).RevenuePeriodsList(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("list closed periods: %w", MapError(err))
	}
	out := make([]ClosedPeriod, len(rows))
	for i, r := range rows {
		out[i] = ClosedPeriod{Period: monthName(r.Period), ClosedAt: r.ClosedAt, Digest: r.Digest}
	}
	return out, nil
}

// JournalLine is one movement of money the journal books: a purchase (a lot that cost money) or a
// recognition (recognised, breakage, refunded, disputed, or a restore, named by its entry's kind:
// refund_restore or dispute_won).
type JournalLine struct {
	At        time.Time
	AccountID string
	LotID     int64
	// EntryID is the entry that moved the lot: the credit that made it, or the debit or restore.
	EntryID  int64
	Kind     string
	Amount   int64
	Currency string
}

// journalPage is how many lines one read of the journal holds: its memory, whatever its length.
const journalPage = 2000

// JournalLines calls each with the journal's lines from from (inclusive) to to (exclusive), in date order,
// reading them a page at a time (keyset on the lines' order), so that a journal of any length is streamed
// in constant memory. An error from each stops the reading and is returned.
func JournalLines(ctx context.Context, q Conn, from, to time.Time, each func(JournalLine) error) error {
	queries := dbsqlc.New(q)
	p := dbsqlc.RevenueJournalPageParams{FromTime: from, ToTime: to, AfterTime: time.Time{}, MaxRows: journalPage}
	for {
		rows, err := queries.RevenueJournalPage(ctx, p)
		if err != nil {
			return fmt.Errorf("read the journal from %s: %w", p.AfterTime.Format(time.RFC3339Nano), MapError(err))
		}
		for _, r := range rows {
			line := JournalLine{At: r.CreatedAt, AccountID: r.AccountID, LotID: r.LotID, EntryID: r.EntryID,
				Kind: r.Kind, Amount: r.Amount, Currency: r.Currency}
			if err := each(line); err != nil {
				return err
			}
		}
		if len(rows) < journalPage {
			return nil
		}
		last := rows[len(rows)-1]
		p.AfterTime, p.AfterAccount, p.AfterLot, p.AfterEntry, p.AfterPosting = last.CreatedAt, last.AccountID, last.LotID, last.EntryID, last.PostingEntryID
	}
}

// OpenPeriodReport returns the liability report of the current month by the database's clock, from its
// first instant to the next month's: the open period so far.
func OpenPeriodReport(ctx context.Context, q Conn) (LiabilityReport, error) {
	now, err := dbsqlc.New(q).RevenuePeriodsClock(ctx)
	if err != nil {
		return LiabilityReport{}, fmt.Errorf("the database's time: %w", MapError(err))
	}
	month := startOfMonth(now.UTC())
	return LiabilityReportOf(ctx, q, month, month.AddDate(0, 1, 0))
}
