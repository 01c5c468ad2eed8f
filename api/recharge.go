package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/onceledger/onceledger/db"
)

// rechargeJSON and alertsJSON show an account's auto-recharge and alert settings (SPEC §13, §17).
type rechargeJSON struct {
	Enabled            bool        `json:"enabled"`
	Threshold          *int64      `json:"threshold"`
	Amount             *int64      `json:"amount"`
	Budget             *budgetJSON `json:"budget"`
	Cooldown           string      `json:"cooldown"`
	Mode               string      `json:"mode"`
	Target             *int64      `json:"target"`
	Failures           int32       `json:"failures"`
	PaymentMethodSaved bool        `json:"payment_method_saved"`
}

// budgetJSON caps what recharge asks per calendar window.
type budgetJSON struct {
	Amount *int64  `json:"amount"`
	Count  *int32  `json:"count"`
	Period *string `json:"period"`
}

type alertsJSON struct {
	LowBalance *int64 `json:"low_balance"`
}

func rechargeOut(a db.Automation) *rechargeJSON {
	out := &rechargeJSON{
		Enabled: a.RechargeEnabled, Threshold: a.RechargeThreshold, Amount: a.RechargeAmount,
		Cooldown: a.Cooldown.String(), Mode: a.Mode, Target: a.Target,
		Failures: a.RechargeFailures, PaymentMethodSaved: a.PaymentMethod != "",
	}
	if a.Budget != nil {
		out.Budget = &budgetJSON{Amount: a.Budget.Amount, Count: a.Budget.Count, Period: &a.Budget.Period}
	}
	return out
}

func alertsOut(a db.Automation) *alertsJSON { return &alertsJSON{LowBalance: a.LowBalanceAlert} }

// maxCooldown is the longest cooldown accounts_recharge_cooldown_check allows.
const maxCooldown = 30 * 24 * time.Hour

// maxBudgetCount is the most attempts per window accounts_recharge_budget_check allows.
const maxBudgetCount = 1_000_000

// handlePutRecharge sets auto-recharge: {"threshold","amount","enabled","budget","cooldown","mode",
// "target"}. Enabling needs a card saved by a top-up with save_payment_method (409
// payment_method_required, decided on the locked row). Every field is checked before anything is
// written; a bad one is answered 400 naming it.
func handlePutRecharge(d Deps) http.Handler {
	type request struct {
		Threshold *int64      `json:"threshold"`
		Amount    *int64      `json:"amount"`
		Enabled   *bool       `json:"enabled"`
		Budget    *budgetJSON `json:"budget"`
		Cooldown  *string     `json:"cooldown"`
		Mode      *string     `json:"mode"`
		Target    *int64      `json:"target"`
	}
	type response struct {
		Recharge *rechargeJSON `json:"recharge"`
	}
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		var req request
		id, err := decodeAccountRequest(w, r, &req)
		if err != nil {
			return err
		}
		if req.Threshold == nil || *req.Threshold < 0 || *req.Threshold > maxAmount {
			return badRequest("invalid_threshold", "threshold is required: a whole number of minor units from 0 to 10^15")
		}
		if req.Amount == nil || *req.Amount <= 0 || *req.Amount > maxAmount {
			return badRequest("invalid_amount", "amount is required: a positive whole number of minor units, at most 10^15")
		}
		if req.Enabled == nil {
			return badRequest("invalid_enabled", "enabled is required: true or false")
		}
		settings := db.RechargeSettings{Enabled: *req.Enabled, Threshold: req.Threshold, Amount: req.Amount, Mode: db.RechargeFixed}
		if req.Mode != nil {
			settings.Mode = *req.Mode
		}
		// The least one recharge asks: the amount, or in target mode what lifts available from just below
		// the threshold to the target.
		oneRecharge := *req.Amount
		switch {
		case settings.Mode == db.RechargeTarget:
			if req.Target == nil || *req.Target <= *req.Threshold || *req.Target > maxAmount {
				return badRequest("invalid_target", "target is required in target mode: above the threshold, at most 10^15")
			}
			settings.Target, oneRecharge = req.Target, *req.Target-*req.Threshold+1
		case settings.Mode != db.RechargeFixed:
			return badRequest("invalid_mode", `mode must be "fixed" or "target"`)
		case req.Target != nil:
			return badRequest("invalid_target", "target is only for target mode")
		}
		if req.Cooldown != nil {
			cooldown, err := time.ParseDuration(*req.Cooldown)
			if err != nil || cooldown < 0 || cooldown > maxCooldown {
				return badRequest("invalid_cooldown", "cooldown must be a Go duration from 0s to 720h (30 days)")
			}
			settings.Cooldown = cooldown
		}
		if b := req.Budget; b != nil {
			if b.Period == nil || (*b.Period != "day" && *b.Period != "week" && *b.Period != "month") {
				return badRequest("invalid_budget_period", `budget.period is required: "day", "week" or "month"`)
			}
			if b.Amount == nil && b.Count == nil {
				return badRequest("invalid_budget", "budget needs an amount, a count, or both")
			}
			if b.Amount != nil && (*b.Amount < oneRecharge || *b.Amount > maxAmount) {
				return badRequest("invalid_budget_amount", fmt.Sprintf("budget.amount must allow one recharge (%d) and be at most 10^15", oneRecharge))
			}
			if b.Count != nil && (*b.Count < 1 || *b.Count > maxBudgetCount) {
				return badRequest("invalid_budget_count", "budget.count must be from 1 to 1000000")
			}
			settings.Budget = &db.RechargeBudget{Amount: b.Amount, Count: b.Count, Period: *b.Period}
		}
		// Recharge charges amount of the account's currency for as many units: a price only when the unit
		// is that currency. Credits are bought at an order's price (POST …/topups), never 1:1 by accident
		// (accounts_recharge_unit_check holds it too).
		acct, err := getAccount(r, d, id)
		if err != nil {
			return err
		}
		if acct.Unit == db.UnitCredits {
			return badRequest("invalid_unit", "auto-recharge is for accounts counted in their currency; this account's unit is credits, which top-ups buy at their own price")
		}
		saved, err := db.SetRecharge(r.Context(), d.Pool, id, settings)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, response{Recharge: rechargeOut(saved)})
		return nil
	})
}

// attemptJSON is one recharge attempt as GET …/recharge lists it.
type attemptJSON struct {
	ID          int64      `json:"id"`
	Status      string     `json:"status"`
	Amount      int64      `json:"amount"`
	Retry       int32      `json:"retry"`
	DeclineCode *string    `json:"decline_code"`
	CreatedAt   time.Time  `json:"created_at"`
	ResolvedAt  *time.Time `json:"resolved_at"`
}

// rechargeAttemptsShown is how many of the newest attempts GET …/recharge lists.
const rechargeAttemptsShown = 10

// handleGetRecharge shows auto-recharge: the settings, the status on the database clock (why no
// attempt is made, and until when), the budget window's usage and the last ten attempts.
func handleGetRecharge(d Deps) http.Handler {
	type windowJSON struct {
		Start           time.Time `json:"start"`
		Attempts        int32     `json:"attempts"`
		RechargedAmount int64     `json:"recharged_amount"`
	}
	type response struct {
		Recharge       *rechargeJSON `json:"recharge"`
		Status         string        `json:"status"`
		NextEligibleAt *time.Time    `json:"next_eligible_at"`
		Window         *windowJSON   `json:"window"`
		Attempts       []attemptJSON `json:"attempts"`
	}
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		id, err := accountID(r)
		if err != nil {
			return err
		}
		if _, err := getAccount(r, d, id); err != nil {
			return err
		}
		settings, err := db.GetAutomation(r.Context(), d.Pool, id)
		if err != nil {
			return err
		}
		status, err := db.GetRechargeStatus(r.Context(), d.Pool, id)
		if err != nil {
			return err
		}
		attempts, err := db.Attempts(r.Context(), d.Pool, id, rechargeAttemptsShown)
		if err != nil {
			return err
		}
		out := response{
			Recharge: rechargeOut(settings), Status: status.Status, NextEligibleAt: status.NextEligibleAt,
			Attempts: make([]attemptJSON, len(attempts)),
		}
		if status.WindowStart != nil {
			out.Window = &windowJSON{Start: status.WindowStart.UTC(), Attempts: status.WindowAttempts, RechargedAmount: status.WindowRechargedAmount}
		}
		for i, a := range attempts {
			out.Attempts[i] = attemptJSON{
				ID: a.ID, Status: a.Status, Amount: a.Amount, Retry: a.Retry, DeclineCode: orNull(a.DeclineCode),
				CreatedAt: a.CreatedAt.UTC(), ResolvedAt: a.ResolvedAt,
			}
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}

// handlePutAlerts sets the low-balance alert: {"low_balance": N} (null: none). balance.low is sent
// once per crossing of available below N, balance.recovered once per crossing back.
func handlePutAlerts(d Deps) http.Handler {
	type request struct {
		LowBalance *int64 `json:"low_balance"`
	}
	type response struct {
		Alerts *alertsJSON `json:"alerts"`
	}
	return handle(d, func(w http.ResponseWriter, r *http.Request) error {
		var req request
		id, err := decodeAccountRequest(w, r, &req)
		if err != nil {
			return err
		}
		if req.LowBalance != nil && (*req.LowBalance < -maxAmount || *req.LowBalance > maxAmount) {
			return badRequest("invalid_low_balance", "low_balance must be a whole number of minor units within ±10^15, or null")
		}
		settings, err := db.SetLowBalanceAlert(r.Context(), d.Pool, id, req.LowBalance)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, response{Alerts: alertsOut(settings)})
		return nil
	})
}
