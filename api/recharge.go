package api

import (
	"net/http"

	"github.com/onceledger/onceledger/db"
)

// rechargeJSON and alertsJSON show an account's auto-recharge and alert settings (SPEC §13).
type rechargeJSON struct {
	Enabled            bool   `json:"enabled"`
	Threshold          *int64 `json:"threshold"`
	Amount             *int64 `json:"amount"`
	Failures           int32  `json:"failures"`
	PaymentMethodSaved bool   `json:"payment_method_saved"`
}

type alertsJSON struct {
	LowBalance *int64 `json:"low_balance"`
}

func rechargeOut(a db.Automation) *rechargeJSON {
	return &rechargeJSON{
		Enabled: a.RechargeEnabled, Threshold: a.RechargeThreshold, Amount: a.RechargeAmount,
		Failures: a.RechargeFailures, PaymentMethodSaved: a.PaymentMethod != "",
	}
}

func alertsOut(a db.Automation) *alertsJSON { return &alertsJSON{LowBalance: a.LowBalanceAlert} }

// handlePutRecharge sets auto-recharge: {"threshold","amount","enabled"}. Enabling needs a card saved
// by a top-up with save_payment_method (409 payment_method_required, decided on the locked row).
func handlePutRecharge(d Deps) http.Handler {
	type request struct {
		Threshold *int64 `json:"threshold"`
		Amount    *int64 `json:"amount"`
		Enabled   *bool  `json:"enabled"`
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
		settings, err := db.SetRecharge(r.Context(), d.Pool, id, *req.Enabled, req.Threshold, req.Amount)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, response{Recharge: rechargeOut(settings)})
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
