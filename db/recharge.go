package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// Auto-recharge and low-balance alerts (SPEC §13). The trigger accounts_available_watch decides, in
// every debit's own transaction, when an attempt is made and when an alert crosses; this file reads and
// resolves what it wrote.

// ErrPaymentMethodRequired: recharge cannot be enabled on an account without a saved card.
var ErrPaymentMethodRequired = errors.New("no saved payment method")

// Recharge attempt statuses, as recharge_attempts_status_check knows them.
const (
	AttemptRequested      = "requested"
	AttemptSucceeded      = "succeeded"
	AttemptFailed         = "failed"
	AttemptActionRequired = "action_required"
)

// Automation is an account's saved card, auto-recharge and alert settings. Empty strings and nil
// pointers mean none.
type Automation struct {
	StripeCustomer    string
	PaymentMethod     string
	RechargeEnabled   bool
	RechargeThreshold *int64
	RechargeAmount    *int64
	RechargeFailures  int32
	LowBalanceAlert   *int64
}

func automationFrom(r dbsqlc.AccountsGetAutomationRow) Automation {
	return Automation{
		StripeCustomer: deref(r.StripeCustomer), PaymentMethod: deref(r.PaymentMethod),
		RechargeEnabled: r.RechargeEnabled, RechargeThreshold: r.RechargeThreshold, RechargeAmount: r.RechargeAmount,
		RechargeFailures: r.RechargeFailures, LowBalanceAlert: r.LowBalanceAlert,
	}
}

// GetAutomation returns the account's settings, or ErrNotFound.
func GetAutomation(ctx context.Context, q Conn, accountID string) (Automation, error) {
	r, err := dbsqlc.New(q).AccountsGetAutomation(ctx, accountID)
	if isNoRows(err) {
		return Automation{}, fmt.Errorf("account %s: %w", accountID, ErrNotFound)
	}
	if err != nil {
		return Automation{}, fmt.Errorf("get settings of %s: %w", accountID, MapError(err))
	}
	return automationFrom(r), nil
}

// SetRecharge sets auto-recharge (threshold and amount, both or neither). Enabling needs a saved card:
// ErrPaymentMethodRequired without one (decided on the locked row), ErrNotFound without the account.
func SetRecharge(ctx context.Context, q Conn, accountID string, enabled bool, threshold, amount *int64) (Automation, error) {
	r, err := dbsqlc.New(q).AccountsSetRecharge(ctx, dbsqlc.AccountsSetRechargeParams{
		ID: accountID, Enabled: enabled, Threshold: threshold, Amount: amount,
	})
	if isNoRows(err) {
		if _, err := GetAccount(ctx, q, accountID); err != nil {
			return Automation{}, err
		}
		return Automation{}, fmt.Errorf("enable recharge of %s: %w", accountID, ErrPaymentMethodRequired)
	}
	if err != nil {
		return Automation{}, fmt.Errorf("set recharge of %s: %w", accountID, MapError(err))
	}
	return automationFrom(dbsqlc.AccountsGetAutomationRow(r)), nil
}

// SetLowBalanceAlert sets the alert threshold (nil: no alerts), or ErrNotFound.
func SetLowBalanceAlert(ctx context.Context, q Conn, accountID string, threshold *int64) (Automation, error) {
	r, err := dbsqlc.New(q).AccountsSetAlerts(ctx, dbsqlc.AccountsSetAlertsParams{ID: accountID, LowBalanceAlert: threshold})
	if isNoRows(err) {
		return Automation{}, fmt.Errorf("account %s: %w", accountID, ErrNotFound)
	}
	if err != nil {
		return Automation{}, fmt.Errorf("set alerts of %s: %w", accountID, MapError(err))
	}
	return automationFrom(dbsqlc.AccountsGetAutomationRow(r)), nil
}

// SetStripeCustomer records the account's Stripe customer unless it already has one.
func SetStripeCustomer(ctx context.Context, q Conn, accountID, customer string) error {
	if _, err := dbsqlc.New(q).AccountsSetStripeCustomer(ctx, dbsqlc.AccountsSetStripeCustomerParams{
		ID: accountID, StripeCustomer: &customer,
	}); err != nil {
		return fmt.Errorf("record customer of %s: %w", accountID, MapError(err))
	}
	return nil
}

// SetPaymentMethod records the card saved for off-session use, when customer is the account's.
// saved is false when it is not (or the card was already the one saved).
func SetPaymentMethod(ctx context.Context, q Conn, accountID, customer, paymentMethod string) (saved bool, err error) {
	n, err := dbsqlc.New(q).AccountsSetPaymentMethod(ctx, dbsqlc.AccountsSetPaymentMethodParams{
		ID: accountID, StripeCustomer: &customer, PaymentMethod: &paymentMethod,
	})
	if err != nil {
		return false, fmt.Errorf("record payment method of %s: %w", accountID, MapError(err))
	}
	return n == 1, nil
}

// Attempt is one recharge attempt.
type Attempt struct {
	AccountID        string
	ID               int64
	Episode          int64
	TopupID          string
	Amount           int64
	Status           string
	PaymentIntent    string
	FailureCode      string
	DisabledRecharge bool
	CreatedAt        time.Time
	ResolvedAt       *time.Time
}

func attemptFrom(r dbsqlc.RechargeAttemptsGetByTopupRow) Attempt {
	return Attempt{
		AccountID: r.AccountID, ID: r.ID, Episode: r.Episode, TopupID: r.TopupID, Amount: r.Amount,
		Status: r.Status, PaymentIntent: deref(r.PaymentIntent), FailureCode: deref(r.FailureCode),
		DisabledRecharge: r.DisabledRecharge, CreatedAt: r.CreatedAt, ResolvedAt: r.ResolvedAt,
	}
}

// AttemptByTopup returns the attempt owning the order, or ErrNotFound (a Checkout order).
func AttemptByTopup(ctx context.Context, q Conn, accountID, topupID string) (Attempt, error) {
	r, err := dbsqlc.New(q).RechargeAttemptsGetByTopup(ctx, dbsqlc.RechargeAttemptsGetByTopupParams{
		AccountID: accountID, TopupID: topupID,
	})
	if isNoRows(err) {
		return Attempt{}, fmt.Errorf("attempt of order %s: %w", topupID, ErrNotFound)
	}
	if err != nil {
		return Attempt{}, fmt.Errorf("read attempt of order %s: %w", topupID, MapError(err))
	}
	return attemptFrom(r), nil
}

// Attempts returns the account's attempts, newest first, at most limit.
func Attempts(ctx context.Context, q Conn, accountID string, limit int32) ([]Attempt, error) {
	rows, err := dbsqlc.New(q).RechargeAttemptsList(ctx, dbsqlc.RechargeAttemptsListParams{AccountID: accountID, MaxRows: limit})
	if err != nil {
		return nil, fmt.Errorf("list attempts of %s: %w", accountID, MapError(err))
	}
	out := make([]Attempt, len(rows))
	for i, r := range rows {
		out[i] = attemptFrom(dbsqlc.RechargeAttemptsGetByTopupRow(r))
	}
	return out, nil
}

// Charge is what the recharge job needs to create an attempt's PaymentIntent.
type Charge struct {
	AccountID, TopupID, Currency, Status string
	AttemptID, Amount                    int64
	// PaymentIntent is the one created earlier, if recorded.
	PaymentIntent, Customer, PaymentMethod string
}

// AttemptCharge returns the attempt with the account's currency and saved card now, or ErrNotFound.
func AttemptCharge(ctx context.Context, q Conn, accountID string, attemptID int64) (Charge, error) {
	r, err := dbsqlc.New(q).RechargeAttemptsGetForCharge(ctx, dbsqlc.RechargeAttemptsGetForChargeParams{
		AccountID: accountID, ID: attemptID,
	})
	if isNoRows(err) {
		return Charge{}, fmt.Errorf("attempt %d of %s: %w", attemptID, accountID, ErrNotFound)
	}
	if err != nil {
		return Charge{}, fmt.Errorf("read attempt %d: %w", attemptID, MapError(err))
	}
	return Charge{
		AccountID: r.AccountID, AttemptID: r.ID, TopupID: r.TopupID, Amount: r.Amount, Status: r.Status,
		PaymentIntent: deref(r.PaymentIntent), Currency: r.Currency,
		Customer: deref(r.StripeCustomer), PaymentMethod: deref(r.PaymentMethod),
	}, nil
}

// SetAttemptPaymentIntent records the PaymentIntent created for the attempt (once).
func SetAttemptPaymentIntent(ctx context.Context, q Conn, accountID string, attemptID int64, paymentIntent string) error {
	err := dbsqlc.New(q).RechargeAttemptsSetPaymentIntent(ctx, dbsqlc.RechargeAttemptsSetPaymentIntentParams{
		AccountID: accountID, ID: attemptID, PaymentIntent: &paymentIntent,
	})
	if err != nil {
		return fmt.Errorf("record payment of attempt %d: %w", attemptID, MapError(err))
	}
	return nil
}

// ResolveAttempt moves a requested attempt to status (succeeded, failed, action_required), once:
// resolved is true only for the call that did. A failure counts toward the three in a row that turn
// recharge off (disabled reports that this one did); a success ends the run. It must run in a
// transaction.
func ResolveAttempt(ctx context.Context, tx Tx, a Attempt, status, paymentIntent, failureCode string) (resolved, disabled bool, err error) {
	q := dbsqlc.New(tx)
	_, err = q.RechargeAttemptsResolve(ctx, dbsqlc.RechargeAttemptsResolveParams{
		AccountID: a.AccountID, ID: a.ID, Status: status, FailureCode: nullable(failureCode), PaymentIntent: nullable(paymentIntent),
	})
	if isNoRows(err) {
		return false, false, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("resolve attempt %d: %w", a.ID, MapError(err))
	}
	switch status {
	case AttemptSucceeded:
		if err := q.AccountsRechargeSucceeded(ctx, a.AccountID); err != nil {
			return false, false, fmt.Errorf("reset failures of %s: %w", a.AccountID, MapError(err))
		}
	case AttemptFailed:
		r, err := q.AccountsRechargeFailed(ctx, a.AccountID)
		if isNoRows(err) {
			return true, false, nil
		}
		if err != nil {
			return false, false, fmt.Errorf("count failure of %s: %w", a.AccountID, MapError(err))
		}
		if !r.RechargeEnabled {
			disabled = true
			if err := q.RechargeAttemptsMarkDisabled(ctx, dbsqlc.RechargeAttemptsMarkDisabledParams{AccountID: a.AccountID, ID: a.ID}); err != nil {
				return false, false, fmt.Errorf("mark attempt %d: %w", a.ID, MapError(err))
			}
		}
	}
	return true, disabled, nil
}

// AttemptRef names one attempt.
type AttemptRef struct {
	AccountID string
	ID        int64
}

// outboxBatch bounds the rows one sweep takes from an outbox.
const outboxBatch = 500

// TakeAttemptJobs takes, in tx, the attempts whose PaymentIntent job is still to enqueue: they are
// marked enqueued (two sweepers never take one), and the caller enqueues their jobs in the same tx, so
// the jobs and the marks commit together.
func TakeAttemptJobs(ctx context.Context, tx Tx) ([]AttemptRef, error) {
	rows, err := dbsqlc.New(tx).RechargeAttemptsTakeJobs(ctx, outboxBatch)
	if err != nil {
		return nil, fmt.Errorf("take attempts to enqueue: %w", MapError(err))
	}
	refs := make([]AttemptRef, len(rows))
	for i, r := range rows {
		refs[i] = AttemptRef(r)
	}
	return refs, nil
}

// TakeAttemptNotices takes, in tx, the resolved attempts whose notification is still to enqueue, like
// TakeAttemptJobs.
func TakeAttemptNotices(ctx context.Context, tx Tx) ([]Attempt, error) {
	rows, err := dbsqlc.New(tx).RechargeAttemptsTakeNotices(ctx, outboxBatch)
	if err != nil {
		return nil, fmt.Errorf("take attempt notices: %w", MapError(err))
	}
	out := make([]Attempt, len(rows))
	for i, r := range rows {
		out[i] = Attempt{
			AccountID: r.AccountID, ID: r.ID, Status: r.Status, Amount: r.Amount, PaymentIntent: deref(r.PaymentIntent),
			FailureCode: deref(r.FailureCode), DisabledRecharge: r.DisabledRecharge, ResolvedAt: r.ResolvedAt,
		}
	}
	return out, nil
}

// BalanceAlert is one alert episode of an account: low since LowAt, recovered at RecoveredAt (nil:
// still low). LowPending and RecoveredPending say which notifications are still to enqueue.
type BalanceAlert struct {
	AccountID          string
	Threshold, Episode int64
	LowAvailable       int64
	LowAt              time.Time
	RecoveredAvailable *int64
	RecoveredAt        *time.Time
	LowPending         bool
	RecoveredPending   bool
}

// TakeAlerts takes, in tx, the alerts whose notifications are still to enqueue, like TakeAttemptJobs.
func TakeAlerts(ctx context.Context, tx Tx) ([]BalanceAlert, error) {
	rows, err := dbsqlc.New(tx).BalanceAlertsTake(ctx, outboxBatch)
	if err != nil {
		return nil, fmt.Errorf("take alerts to enqueue: %w", MapError(err))
	}
	out := make([]BalanceAlert, len(rows))
	for i, r := range rows {
		out[i] = BalanceAlert(r)
	}
	return out, nil
}

// BalanceAlerts returns the account's alert episodes, oldest first.
func BalanceAlerts(ctx context.Context, q Conn, accountID string) ([]BalanceAlert, error) {
	rows, err := dbsqlc.New(q).BalanceAlertsList(ctx, accountID)
	if err != nil {
		return nil, fmt.Errorf("list alerts of %s: %w", accountID, MapError(err))
	}
	out := make([]BalanceAlert, len(rows))
	for i, r := range rows {
		out[i] = BalanceAlert{
			AccountID: r.AccountID, Threshold: r.Threshold, Episode: r.Episode, LowAvailable: r.LowAvailable,
			LowAt: r.LowAt, RecoveredAvailable: r.RecoveredAvailable, RecoveredAt: r.RecoveredAt,
		}
	}
	return out, nil
}
