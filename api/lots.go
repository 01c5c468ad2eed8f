package api

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/mux"

	"github.com/onceledger/onceledger/db"
)

// maxLots bounds GET /v1/accounts/{id}/lots.
const maxLots = 1000

type lotJSON struct {
	ID        int64      `json:"id"`
	Category  string     `json:"category"`
	Priority  int        `json:"priority"`
	Amount    int64      `json:"amount"`
	Remaining int64      `json:"remaining"`
	ExpiresAt *time.Time `json:"expires_at"`
	CreatedAt time.Time  `json:"created_at"`
	ClosedAt  *time.Time `json:"closed_at"`
}

func lotOut(l db.Lot) lotJSON {
	return lotJSON{
		ID: l.ID, Category: l.Category, Priority: l.Priority, Amount: l.Amount, Remaining: l.Remaining,
		ExpiresAt: l.ExpiresAt, CreatedAt: l.CreatedAt, ClosedAt: l.ClosedAt,
	}
}

type drawJSON struct {
	LotID  int64 `json:"lot_id"`
	Amount int64 `json:"amount"`
}

// handleListLots lists an account's lots in draw order: those with credit left, or every lot with
// ?all=true.
func handleListLots(d Deps) http.Handler {
	type response struct {
		Lots []lotJSON `json:"lots"`
	}
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		id, err := accountID(r)
		if err != nil {
			return err
		}
		all := false
		if raw := r.URL.Query().Get("all"); raw != "" {
			if all, err = strconv.ParseBool(raw); err != nil {
				return badRequest("invalid_all", "all must be true or false")
			}
		}
		if _, err := getAccount(r, d, id); err != nil {
			return err
		}
		lots, err := db.Lots(r.Context(), d.Pool, id, all, maxLots)
		if err != nil {
			return err
		}
		out := response{Lots: make([]lotJSON, len(lots))}
		for i, l := range lots {
			out.Lots[i] = lotOut(l)
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}

// handleVoidLot voids a lot: a void entry keyed void:{lot_id} takes what is left, once.
func handleVoidLot(d Deps) http.Handler {
	type response struct {
		Lot    lotJSON `json:"lot"`
		Posted bool    `json:"posted"`
	}
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		id, err := strconv.ParseInt(mux.Vars(r)["id"], 10, 64)
		if err != nil || id <= 0 {
			return fmt.Errorf("%w: %q", db.ErrLotNotFound, mux.Vars(r)["id"])
		}
		if err := decodeOptionalJSON(w, r, &struct{}{}); err != nil {
			return err
		}
		voided, err := d.Ledger.VoidLot(r.Context(), id)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, response{Lot: lotOut(voided.Lot), Posted: voided.Posted})
		return nil
	})
}
