package api

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onceledger/onceledger/db"
)

// timeQuery reads the RFC 3339 query parameter name, which is required.
func timeQuery(r *http.Request, name string) (time.Time, error) {
	raw := r.URL.Query().Get(name)
	t, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		return time.Time{}, badRequest("invalid_"+name, name+" is required: an RFC 3339 time such as 2026-11-02T14:03:00Z")
	}
	return t.UTC(), nil
}

// handleGetBalanceAt answers the account's balance at ?at=: the balance_after of its last entry at or
// before that moment, 0 before its first entry.
func handleGetBalanceAt(d Deps) http.Handler {
	type response struct {
		AccountID string    `json:"account_id"`
		At        time.Time `json:"at"`
		Balance   int64     `json:"balance"`
	}
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		id, err := accountID(r)
		if err != nil {
			return err
		}
		at, err := timeQuery(r, "at")
		if err != nil {
			return err
		}
		if _, err := getAccount(r, d, id); err != nil {
			return err
		}
		balance, err := db.BalanceAt(r.Context(), d.Pool, id, at)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, response{AccountID: id, At: at, Balance: balance})
		return nil
	})
}

// statementCSVHeader is the header row of a CSV statement.
var statementCSVHeader = []string{"seq", "id", "created_at", "kind", "amount", "balance_after", "dedupe_key", "description", "subject", "feature"}

// handleGetStatement answers the account's statement from ?from= (inclusive) to ?to= (exclusive): the
// opening and closing balances and every entry between, in seq order, as JSON or (Accept: text/csv or
// ?format=csv) as CSV with the balances in the Statement-Opening-Balance and Statement-Closing-Balance
// headers. Entries are written as they are read, a page at a time, so a statement of any length is
// served in constant memory. Once the first byte is sent the status cannot change: a failure after it
// is logged and the connection cut, so a client never takes a truncated statement for a whole one.
func handleGetStatement(d Deps) http.Handler {
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		id, err := accountID(r)
		if err != nil {
			return err
		}
		from, err := timeQuery(r, "from")
		if err != nil {
			return err
		}
		to, err := timeQuery(r, "to")
		if err != nil {
			return err
		}
		if to.Before(from) {
			return badRequest("invalid_to", "to must not be before from")
		}
		asCSV, err := wantsCSV(r)
		if err != nil {
			return err
		}
		var members bool
		switch r.URL.Query().Get("include") {
		case "":
		case "members":
			members = true
		default:
			return badRequest("invalid_include", "include must be members")
		}
		acct, err := getAccount(r, d, id)
		if err != nil {
			return err
		}
		bounds, err := db.StatementBounds(r.Context(), d.Pool, id, from, to)
		if err != nil {
			return err
		}
		w.Header().Set("Statement-Opening-Balance", strconv.FormatInt(bounds.OpeningBalance, 10))
		w.Header().Set("Statement-Closing-Balance", strconv.FormatInt(bounds.ClosingBalance, 10))
		if asCSV {
			err = writeStatementCSV(w, r, d.Pool, bounds, members)
		} else {
			err = writeStatementJSON(w, r, d.Pool, acct, from, to, bounds, members)
		}
		if err != nil {
			d.Log.ErrorContext(r.Context(), "statement cut short", "account", id, "err", err)
			panic(http.ErrAbortHandler)
		}
		return nil
	})
}

// statementWriteWindow is how long a statement may take to write its next statementRefresh entries:
// the server's write timeout bounds a whole response, which a long statement would outlive, so the
// deadline moves as the statement makes progress (and still fires for a client that stopped reading).
const (
	statementWriteWindow = 30 * time.Second
	statementRefresh     = 1000
)

// progress moves the response's write deadline forward every statementRefresh entries.
type progress struct {
	rc      *http.ResponseController
	written int
}

func newProgress(w http.ResponseWriter) *progress {
	p := &progress{rc: http.NewResponseController(w)}
	p.extend()
	return p
}

func (p *progress) extend() {
	// A writer without deadlines (a test recorder) has none to move.
	_ = p.rc.SetWriteDeadline(time.Now().Add(statementWriteWindow))
}

func (p *progress) entryWritten() {
	p.written++
	if p.written%statementRefresh == 0 {
		p.extend()
	}
}

// wantsCSV reads the statement's format: ?format=csv|json, else the Accept header.
func wantsCSV(r *http.Request) (bool, error) {
	switch r.URL.Query().Get("format") {
	case "csv":
		return true, nil
	case "json":
		return false, nil
	case "":
		return strings.Contains(r.Header.Get("Accept"), "text/csv"), nil
	}
	return false, badRequest("invalid_format", "format must be json or csv")
}

// writeStatementCSV writes the statement as CSV; with members, each entry says the member a pool paid it
// for (a last column, on_behalf_of).
func writeStatementCSV(w http.ResponseWriter, r *http.Request, q db.Conn, bounds db.StatementRange, members bool) error {
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	out := csv.NewWriter(w)
	header := statementCSVHeader
	if members {
		header = append(slices.Clip(header), "on_behalf_of")
	}
	if err := out.Write(header); err != nil {
		return err
	}
	progress := newProgress(w)
	err := db.StatementEntries(r.Context(), q, bounds, func(e db.Entry) error {
		progress.entryWritten()
		row := []string{
			strconv.FormatInt(e.Seq, 10), strconv.FormatInt(e.ID, 10), e.CreatedAt.UTC().Format(time.RFC3339Nano),
			e.Kind, strconv.FormatInt(e.Amount, 10), strconv.FormatInt(e.BalanceAfter, 10), csvText(e.DedupeKey), csvText(e.Description),
			csvText(e.Subject), csvText(e.Feature),
		}
		if members {
			row = append(row, csvText(e.OnBehalfOf))
		}
		return out.Write(row)
	})
	if err != nil {
		return err
	}
	out.Flush()
	return out.Error()
}

// csvText writes a text cell a spreadsheet cannot take for a formula (CSV injection): one starting
// with = + - @, a tab or a carriage return gets a leading apostrophe, which spreadsheets read as "text".
// Numbers are written as they are, so a negative amount stays a number.
func csvText(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

// statementHead is the JSON statement without its entries, which are streamed after it.
type statementHead struct {
	AccountID      string    `json:"account_id"`
	Currency       string    `json:"currency"`
	From           time.Time `json:"from"`
	To             time.Time `json:"to"`
	OpeningBalance int64     `json:"opening_balance"`
	ClosingBalance int64     `json:"closing_balance"`
}

// writeStatementJSON streams the statement as one JSON object; with members, each entry a pool paid for a
// member names it (on_behalf_of).
func writeStatementJSON(w http.ResponseWriter, r *http.Request, q db.Conn, acct db.Account, from, to time.Time, bounds db.StatementRange, members bool) error {
	head, err := json.Marshal(statementHead{
		AccountID: acct.ID, Currency: acct.Currency, From: from, To: to,
		OpeningBalance: bounds.OpeningBalance, ClosingBalance: bounds.ClosingBalance,
	})
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	out := bufio.NewWriter(w)
	// The head's closing brace gives way to the entries array, so the object stays one JSON value.
	out.Write(head[:len(head)-1])
	out.WriteString(`,"entries":[`)
	first := true
	progress := newProgress(w)
	err = db.StatementEntries(r.Context(), q, bounds, func(e db.Entry) error {
		progress.entryWritten()
		entry := entryOut(e)
		if members {
			entry.OnBehalfOf = e.OnBehalfOf
		}
		line, err := json.Marshal(entry)
		if err != nil {
			return err
		}
		if !first {
			out.WriteByte(',')
		}
		first = false
		_, err = out.Write(line)
		return err
	})
	if err != nil {
		return err
	}
	out.WriteString("]}\n")
	return out.Flush()
}
