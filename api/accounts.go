package api

import (
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/gorilla/mux"

	"github.com/onceledger/onceledger/db"
)

// Ids as the schema accepts them (accounts_id_format_check, decisions_id_format_check): checked here
// first so that bad input is a 400 naming the field, not a constraint violation.
var (
	accountIDPattern  = idPattern{max: 64}  // ^[A-Za-z0-9_.:-]{1,64}$
	decisionIDPattern = idPattern{max: 128} // ^[A-Za-z0-9_.:-]{1,128}$
	currencyPattern   = regexp.MustCompile(`^[a-z]{3}$`)
)

// idPattern is ^[A-Za-z0-9_.:-]{1,max}$, the ids' format (with at, '@' too: a subject's), matched byte
// by byte: it runs on every request and on every decision of a batch, where a regexp cost more than the
// rest of the check.
type idPattern struct {
	max int
	at  bool
}

func (p idPattern) MatchString(s string) bool {
	if len(s) == 0 || len(s) > p.max {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '.', c == ':', c == '-':
		case c == '@' && p.at:
		default:
			return false
		}
	}
	return true
}

const (
	// smallBody bounds the JSON bodies of single-object requests.
	smallBody = 16 << 10
	// maxAmount bounds every amount and cost the API takes, as the webhook's (db.MaxAmount).
	maxAmount = db.MaxAmount
	// Page sizes of the listings.
	defaultPageSize = 50
	maxPageSize     = 500
)

type accountJSON struct {
	ID        string    `json:"id"`
	Currency  string    `json:"currency"`
	Balance   int64     `json:"balance"`
	Held      int64     `json:"held"`
	Available int64     `json:"available"`
	CreatedAt time.Time `json:"created_at"`
	// Unit is what the balance counts: currency (its minor unit) or credits.
	Unit string `json:"unit"`
	// ParentID is the account's pool; absent for a root.
	ParentID string `json:"parent_id,omitempty"`
	// Recharge and Alerts are shown by GET /v1/accounts/{id}.
	Recharge *rechargeJSON `json:"recharge,omitempty"`
	Alerts   *alertsJSON   `json:"alerts,omitempty"`
}

func accountOut(a db.Account) accountJSON {
	return accountJSON{
		ID: a.ID, Currency: a.Currency, Balance: a.Balance, Held: a.Held, Available: a.Available(), CreatedAt: a.CreatedAt,
		Unit: a.Unit, ParentID: a.ParentID,
	}
}

type entryJSON struct {
	ID            int64     `json:"id"`
	AccountID     string    `json:"account_id"`
	Kind          string    `json:"kind"`
	Amount        int64     `json:"amount"`
	Description   string    `json:"description"`
	DedupeKey     *string   `json:"dedupe_key"`
	PaymentIntent *string   `json:"payment_intent"`
	CreatedAt     time.Time `json:"created_at"`
	Seq           int64     `json:"seq"`
	BalanceAfter  int64     `json:"balance_after"`
	// Subject and Feature: who spent and on what, for the entry of a hold or a decision (or an adjustment
	// that named them); absent when none.
	Subject string `json:"subject,omitempty"`
	Feature string `json:"feature,omitempty"`
	// OnBehalfOf is the member a pool paid the entry for (statements with include=members, and a
	// capture's parts).
	OnBehalfOf string `json:"on_behalf_of,omitempty"`
	// Draws are the lots a debit drew from (the entries list only).
	Draws []drawJSON `json:"draws,omitempty"`
}

func entryOut(e db.Entry) entryJSON {
	return entryJSON{
		ID: e.ID, AccountID: e.AccountID, Kind: e.Kind, Amount: e.Amount, Description: e.Description,
		DedupeKey: orNull(e.DedupeKey), PaymentIntent: orNull(e.PaymentIntent), CreatedAt: e.CreatedAt,
		Seq: e.Seq, BalanceAfter: e.BalanceAfter, Subject: e.Subject, Feature: e.Feature,
	}
}

func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// accountID is the {id} of an /v1/accounts/{id}/… route, checked.
func accountID(r *http.Request) (string, error) {
	id := mux.Vars(r)["id"]
	if !accountIDPattern.MatchString(id) {
		return "", badRequest("invalid_account_id", "account id must be 1-64 characters of [A-Za-z0-9_.:-]")
	}
	return id, nil
}

// decodeAccountRequest checks the {id} of an /v1/accounts/{id}/… route, then decodes the body into dst.
func decodeAccountRequest(w http.ResponseWriter, r *http.Request, dst any) (string, error) {
	id, err := accountID(r)
	if err != nil {
		return "", err
	}
	return id, decodeJSON(w, r, smallBody, dst)
}

// getAccount reads the account, answering a missing one as 404 account_not_found.
func getAccount(r *http.Request, d Deps, id string) (db.Account, error) {
	acct, err := db.GetAccount(r.Context(), d.Pool, id)
	if errors.Is(err, db.ErrNotFound) {
		return db.Account{}, &Error{Status: http.StatusNotFound, Code: "account_not_found", Message: "no account " + id}
	}
	return acct, err
}

// handlePutAccount creates the account idempotently: 201 when this call created it, 200 when it
// existed with the same currency and parent, 409 currency_mismatch or parent_immutable otherwise. A
// parent_id makes the account a member of that pool (SPEC §18): 404 parent_not_found when it does not
// exist, 409 currency_mismatch when it has another currency, 409 parent_too_deep below a tree's third
// level. The signup grant is posted once, by the call that creates the account
// (db.Ledger.CreateMemberIn).
func handlePutAccount(d Deps) http.Handler {
	type request struct {
		Currency *string `json:"currency"`
		// Unit: currency (default) or credits, a unit of the product's own that top-ups buy at a price.
		Unit     *string `json:"unit"`
		ParentID *string `json:"parent_id"`
	}
	type response struct {
		Account accountJSON `json:"account"`
		Created bool        `json:"created"`
		Granted bool        `json:"granted"`
	}
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		var req request
		id, err := decodeAccountRequest(w, r, &req)
		if err != nil {
			return err
		}
		if req.Currency == nil || !currencyPattern.MatchString(*req.Currency) {
			return badRequest("invalid_currency", `currency is required: a lower-case ISO 4217 code such as "usd"`)
		}
		unit := db.UnitCurrency
		if req.Unit != nil {
			unit = *req.Unit
		}
		if unit != db.UnitCurrency && unit != db.UnitCredits {
			return badRequest("invalid_unit", `unit must be "currency" or "credits"`)
		}
		var parentID string
		if req.ParentID != nil {
			parentID = *req.ParentID
			if !accountIDPattern.MatchString(parentID) || parentID == id {
				return badRequest("invalid_parent_id", "parent_id must be another account's id: 1-64 characters of [A-Za-z0-9_.:-]")
			}
		}
		answersOnEffect(r, http.StatusCreated)
		out, err := d.Ledger.CreateMemberIn(r.Context(), id, *req.Currency, unit, parentID, d.Config.SignupGrant)
		if err != nil {
			return err
		}
		status := http.StatusOK
		if out.Created {
			status = http.StatusCreated
		}
		writeJSON(w, status, response{Account: accountOut(out.Account), Created: out.Created, Granted: out.Granted})
		return nil
	})
}

func handleGetAccount(d Deps) http.Handler {
	type response struct {
		Account accountJSON `json:"account"`
	}
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		id, err := accountID(r)
		if err != nil {
			return err
		}
		acct, err := getAccount(r, d, id)
		if err != nil {
			return err
		}
		settings, err := db.GetAutomation(r.Context(), d.Pool, id)
		if err != nil {
			return err
		}
		out := accountOut(acct)
		out.Recharge, out.Alerts = rechargeOut(settings), alertsOut(settings)
		writeJSON(w, http.StatusOK, response{Account: out})
		return nil
	})
}

// handleListEntries pages through an account's entries newest first. The cursor is an entry id
// (keyset on ledger_account_id_idx): entries posted while a client walks the pages are newer than
// every cursor it holds, so they never shift a page, and each older entry is returned exactly once.
func handleListEntries(d Deps) http.Handler {
	type response struct {
		Entries []entryJSON `json:"entries"`
		Next    *string     `json:"next"`
	}
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		id, err := accountID(r)
		if err != nil {
			return err
		}
		limit, before, err := pageQuery(r, "before")
		if err != nil {
			return err
		}
		if _, err := getAccount(r, d, id); err != nil {
			return err
		}
		entries, err := db.Entries(r.Context(), d.Pool, id, before, int32(limit+1))
		if err != nil {
			return err
		}
		entries, next := onePage(entries, limit, func(e db.Entry) int64 { return e.ID })
		ids := make([]int64, len(entries))
		for i, e := range entries {
			ids[i] = e.ID
		}
		draws, err := db.EntryDraws(r.Context(), d.Pool, id, ids)
		if err != nil {
			return err
		}
		out := response{Entries: make([]entryJSON, len(entries)), Next: next}
		for i, e := range entries {
			out.Entries[i] = entryOut(e)
			for _, dr := range draws[e.ID] {
				out.Entries[i].Draws = append(out.Entries[i].Draws, drawJSON{LotID: dr.LotID, Amount: dr.Amount})
			}
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}

// pageQuery reads a listing's ?limit= (1..maxPageSize, defaultPageSize when absent) and its keyset
// cursor, the query parameter cursorName (a positive id, 0 when absent).
func pageQuery(r *http.Request, cursorName string) (limit int, cursor int64, err error) {
	limit = defaultPageSize
	if raw := r.URL.Query().Get("limit"); raw != "" {
		if limit, err = strconv.Atoi(raw); err != nil || limit < 1 || limit > maxPageSize {
			return 0, 0, badRequest("invalid_limit", "limit must be a whole number from 1 to "+strconv.Itoa(maxPageSize))
		}
	}
	if raw := r.URL.Query().Get(cursorName); raw != "" {
		if cursor, err = strconv.ParseInt(raw, 10, 64); err != nil || cursor < 1 {
			return 0, 0, badRequest("invalid_"+cursorName, cursorName+" must be a cursor returned as next by an earlier page")
		}
	}
	return limit, cursor, nil
}

// onePage cuts rows, fetched with limit+1 so that no count is needed, to one page, and returns the
// cursor of the next page: the key of the page's last row, or nil when there is no next page.
func onePage[T any](rows []T, limit int, key func(T) int64) ([]T, *string) {
	if len(rows) <= limit {
		return rows, nil
	}
	next := strconv.FormatInt(key(rows[limit-1]), 10)
	return rows[:limit], &next
}

// handleGetMembers lists a pool's members (SPEC §18): each child with its balance, held, available and
// this month's spending, its own and drawn from this pool. 404 account_not_found for no account.
func handleGetMembers(d Deps) http.Handler {
	type member struct {
		ID        string `json:"id"`
		Balance   int64  `json:"balance"`
		Held      int64  `json:"held"`
		Available int64  `json:"available"`
		Spent     struct {
			Own      int64 `json:"own"`
			FromPool int64 `json:"from_pool"`
		} `json:"spent"`
	}
	type response struct {
		Members []member `json:"members"`
	}
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		id, err := accountID(r)
		if err != nil {
			return err
		}
		if _, err := getAccount(r, d, id); err != nil {
			return err
		}
		members, err := db.Members(r.Context(), d.Pool, id)
		if err != nil {
			return err
		}
		out := response{Members: make([]member, len(members))}
		for i, m := range members {
			out.Members[i] = member{ID: m.ID, Balance: m.Balance, Held: m.Held, Available: m.Available()}
			out.Members[i].Spent.Own, out.Members[i].Spent.FromPool = m.SpentOwn, m.DrawnFromPool
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}
