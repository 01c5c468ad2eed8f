package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

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

// Recharge modes (accounts_recharge_mode_check): fixed buys the amount, target restores available to
// the target.
const (
	RechargeFixed  = "fixed"
	RechargeTarget = "target"
)

// RechargeBudget caps what recharge asks of the card per calendar window (day, week or month): at most
// Amount, and at most Count attempts (nil: no cap of that kind).
type RechargeBudget struct {
	Amount *int64
	Count  *int32
	Period string
}

// RechargeSettings are an account's auto-recharge settings (SPEC §13, §17). Threshold and Amount come
// as a pair or not at all; Mode is RechargeFixed or RechargeTarget (which needs Target).
type RechargeSettings struct {
	Enabled           bool
	Threshold, Amount *int64
	Budget            *RechargeBudget
	Cooldown          time.Duration
	Mode              string
	Target            *int64
}

// Automation is an account's saved card, auto-recharge and alert settings. Empty strings and nil
// pointers mean none. Stopped is why the failure ladder turned recharge off.
type Automation struct {
	StripeCustomer    string
	PaymentMethod     string
	RechargeEnabled   bool
	RechargeThreshold *int64
	RechargeAmount    *int64
	RechargeFailures  int32
	LowBalanceAlert   *int64
	Budget            *RechargeBudget
	Cooldown          time.Duration
	Mode              string
	Target            *int64
	Stopped           string
}

func automationFrom(r dbsqlc.AccountsGetAutomationRow) Automation {
	a := Automation{
		StripeCustomer: deref(r.StripeCustomer), PaymentMethod: deref(r.PaymentMethod),
		RechargeEnabled: r.RechargeEnabled, RechargeThreshold: r.RechargeThreshold, RechargeAmount: r.RechargeAmount,
		RechargeFailures: r.RechargeFailures, LowBalanceAlert: r.LowBalanceAlert,
		Cooldown: time.Duration(r.RechargeCooldown.Microseconds) * time.Microsecond, Mode: r.RechargeMode,
		Target: r.RechargeTarget, Stopped: deref(r.RechargeStopped),
	}
	if r.RechargeBudgetPeriod != nil {
		a.Budget = &RechargeBudget{Amount: r.RechargeBudgetAmount, Count: r.RechargeBudgetCount, Period: *r.RechargeBudgetPeriod}
	}
	return a
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

// SetRecharge sets auto-recharge, and moves the recharge status the settings change (one
// recharge.status_changed), in one transaction. Enabling needs a saved card: ErrPaymentMethodRequired
// without one (decided on the locked row), ErrNotFound without the account. Enabling what the failure
// ladder stopped clears why and starts a new episode. The request's record (PendingAudit) commits with
// the settings.
func SetRecharge(ctx context.Context, b Beginner, accountID string, s RechargeSettings) (Automation, error) {
	p := dbsqlc.AccountsSetRechargeParams{
		ID: accountID, Enabled: s.Enabled, Threshold: s.Threshold, Amount: s.Amount, Mode: s.Mode, Target: s.Target,
		Cooldown: pgtype.Interval{Microseconds: s.Cooldown.Microseconds(), Valid: true},
	}
	if p.Mode == "" {
		p.Mode = RechargeFixed
	}
	if s.Budget != nil {
		p.BudgetAmount, p.BudgetCount, p.BudgetPeriod = s.Budget.Amount, s.Budget.Count, &s.Budget.Period
	}
	var saved Automation
	err := InAuditedTx(ctx, b, func(tx Tx) (bool, error) {
		q := dbsqlc.New(tx)
		r, err := q.AccountsSetRecharge(ctx, p)
		if isNoRows(err) {
			if _, err := GetAccount(ctx, tx, accountID); err != nil {
				return false, err
			}
			return false, fmt.Errorf("enable recharge of %s: %w", accountID, ErrPaymentMethodRequired)
		}
		if err != nil {
			return false, fmt.Errorf("set recharge of %s: %w", accountID, MapError(err))
		}
		saved = automationFrom(dbsqlc.AccountsGetAutomationRow(r))
		return true, syncRechargeStatus(ctx, q, accountID, StatusChangedBySettings)
	})
	return saved, err
}

// Why the recharge status changed (recharge_status_changes_check): a PUT's settings, an attempt made
// or resolved (StatusChangedByAttempt + its status), a refused attempt, available back at the
// threshold, or the end of a cooldown or budget window on the database clock.
const (
	StatusChangedBySettings = "settings"
	StatusChangedByAttempt  = "attempt_"
)

// syncRechargeStatus moves the stored recharge status to the computed one and records the change once
// (recharge_status_sync), in the transaction of what changed it.
func syncRechargeStatus(ctx context.Context, q *dbsqlc.Queries, accountID, reason string) error {
	if _, err := q.RechargeStatusSync(ctx, dbsqlc.RechargeStatusSyncParams{AccountID: accountID, Reason: reason}); err != nil {
		return fmt.Errorf("move recharge status of %s: %w", accountID, MapError(err))
	}
	return nil
}

// Recharge statuses (SPEC §17), as recharge_status_compute derives them.
const (
	RechargeReady                 = "ready"
	RechargePendingAttempt        = "pending_attempt"
	RechargeCoolingDown           = "cooling_down"
	RechargeBudgetExhausted       = "budget_exhausted"
	RechargeRequiresAction        = "requires_action"
	RechargeDisabledAfterFailures = "disabled_after_failures"
	RechargePaymentMethodRequired = "payment_method_required"
	RechargeOff                   = "off"
)

// RechargeStatus is where an account's auto-recharge stands now, on the database clock: Status, when
// a cooling_down or budget_exhausted status ends (NextEligibleAt), and the current budget window's
// usage (WindowStart nil: no budget).
type RechargeStatus struct {
	Status                string
	NextEligibleAt        *time.Time
	WindowStart           *time.Time
	WindowAttempts        int32
	WindowRechargedAmount int64
}

// GetRechargeStatus returns the account's recharge status, or ErrNotFound.
func GetRechargeStatus(ctx context.Context, q Conn, accountID string) (RechargeStatus, error) {
	r, err := dbsqlc.New(q).RechargeStatusGet(ctx, accountID)
	if isNoRows(err) {
		return RechargeStatus{}, fmt.Errorf("account %s: %w", accountID, ErrNotFound)
	}
	if err != nil {
		return RechargeStatus{}, fmt.Errorf("recharge status of %s: %w", accountID, MapError(err))
	}
	return RechargeStatus{
		Status: r.Status, NextEligibleAt: optionalTime(r.NextEligibleAt), WindowStart: optionalTime(r.WindowStart),
		WindowAttempts: r.WindowAttempts, WindowRechargedAmount: r.WindowRechargedAmount,
	}, nil
}

// EndElapsedRechargeStatuses moves the stored cooling_down and budget_exhausted statuses whose end has
// come on the database clock (a batch), each in its own statement, and returns how many changes it
// recorded. Two sweeps racing record each change once (recharge_status_sync's conditional UPDATE).
func EndElapsedRechargeStatuses(ctx context.Context, q Conn) (int, error) {
	queries := dbsqlc.New(q)
	due, err := queries.RechargeStatusDue(ctx, outboxBatch)
	if err != nil {
		return 0, fmt.Errorf("find elapsed recharge statuses: %w", MapError(err))
	}
	var n int
	for _, d := range due {
		changed, err := queries.RechargeStatusSync(ctx, dbsqlc.RechargeStatusSyncParams{AccountID: d.ID, Reason: d.Reason})
		if err != nil {
			return n, fmt.Errorf("end recharge status of %s: %w", d.ID, MapError(err))
		}
		if changed {
			n++
		}
	}
	return n, nil
}

// StatusChange is one change of an account's recharge status, numbered Seq per account.
type StatusChange struct {
	AccountID      string
	Seq            int64
	From, To       string
	Reason         string
	NextEligibleAt *time.Time
	ChangedAt      time.Time
}

// TakeStatusChanges takes, in tx, the status changes whose recharge.status_changed is still to
// enqueue, like TakeAttemptJobs.
func TakeStatusChanges(ctx context.Context, tx Tx) ([]StatusChange, error) {
	rows, err := dbsqlc.New(tx).RechargeStatusTakeNotices(ctx, outboxBatch)
	if err != nil {
		return nil, fmt.Errorf("take recharge status changes: %w", MapError(err))
	}
	out := make([]StatusChange, len(rows))
	for i, r := range rows {
		out[i] = StatusChange{
			AccountID: r.AccountID, Seq: r.Seq, From: r.FromStatus, To: r.ToStatus, Reason: r.Reason,
			NextEligibleAt: r.NextEligibleAt, ChangedAt: r.ChangedAt,
		}
	}
	return out, nil
}

// optionalTime reads a nullable timestamptz sqlc could not type.
func optionalTime(v any) *time.Time {
	if t, ok := v.(time.Time); ok {
		return &t
	}
	return nil
}

// SetLowBalanceAlert sets the alert threshold (nil: no alerts), or ErrNotFound. The request's record
// (PendingAudit) commits with it.
func SetLowBalanceAlert(ctx context.Context, b Beginner, accountID string, threshold *int64) (Automation, error) {
	var saved Automation
	err := InAuditedTx(ctx, b, func(tx Tx) (bool, error) {
		r, err := dbsqlc.New(tx).AccountsSetAlerts(ctx, dbsqlc.AccountsSetAlertsParams{ID: accountID, LowBalanceAlert: threshold})
		if isNoRows(err) {
			return false, fmt.Errorf("account %s: %w", accountID, ErrNotFound)
		}
		if err != nil {
			return false, fmt.Errorf("set alerts of %s: %w", accountID, MapError(err))
		}
		saved = automationFrom(dbsqlc.AccountsGetAutomationRow(r))
		return true, nil
	})
	return saved, err
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
	// Retry is the try of its episode (0: the first); DeclineCode the card's decline, HardDecline
	// whether it stopped recharge for good; RetryAt when the ladder's next try is due.
	Retry       int32
	DeclineCode string
	HardDecline bool
	RetryAt     *time.Time
}

func attemptFrom(r dbsqlc.RechargeAttemptsGetByTopupRow) Attempt {
	return Attempt{
		AccountID: r.AccountID, ID: r.ID, Episode: r.Episode, TopupID: r.TopupID, Amount: r.Amount,
		Status: r.Status, PaymentIntent: deref(r.PaymentIntent), FailureCode: deref(r.FailureCode),
		DisabledRecharge: r.DisabledRecharge, CreatedAt: r.CreatedAt, ResolvedAt: r.ResolvedAt,
		Retry: r.Retry, DeclineCode: deref(r.DeclineCode), HardDecline: r.HardDecline, RetryAt: r.RetryAt,
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

// retryBackoff is the failure ladder: how long after the failure of try n of an episode its next try
// is due (SPEC §17).
var retryBackoff = []time.Duration{time.Hour, 6 * time.Hour, 24 * time.Hour}

// ResolveAttempt moves a requested attempt to status (succeeded, failed, action_required), once:
// resolved is true only for the call that did. A failure counts toward the three in a row that stop
// recharge, a hard decline (told by the schema from declineCode) stops it at once and forgets the card,
// and a failure that stops nothing schedules the episode's next try (disabled reports that this one
// stopped it); a success ends the run. It must run in a transaction.
func ResolveAttempt(ctx context.Context, tx Tx, a Attempt, status, paymentIntent, failureCode, declineCode string) (resolved, disabled bool, err error) {
	q := dbsqlc.New(tx)
	r, err := q.RechargeAttemptsResolve(ctx, dbsqlc.RechargeAttemptsResolveParams{
		AccountID: a.AccountID, ID: a.ID, Status: status, FailureCode: nullable(failureCode),
		DeclineCode: nullable(declineCode), PaymentIntent: nullable(paymentIntent),
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
		f, err := q.AccountsRechargeFailed(ctx, dbsqlc.AccountsRechargeFailedParams{ID: a.AccountID, Hard: r.HardDecline})
		switch {
		case isNoRows(err):
			// Recharge was off already: nothing to count or schedule.
			err = nil
		case err != nil:
			return false, false, fmt.Errorf("count failure of %s: %w", a.AccountID, MapError(err))
		case f.RechargeEnabled:
			backoff := retryBackoff[min(int(r.Retry), len(retryBackoff)-1)]
			err = q.RechargeAttemptsScheduleRetry(ctx, dbsqlc.RechargeAttemptsScheduleRetryParams{
				AccountID: a.AccountID, ID: a.ID, Backoff: pgtype.Interval{Microseconds: backoff.Microseconds(), Valid: true},
			})
		default:
			disabled = true
			err = q.RechargeAttemptsMarkDisabled(ctx, dbsqlc.RechargeAttemptsMarkDisabledParams{AccountID: a.AccountID, ID: a.ID})
		}
		if err != nil {
			return false, false, fmt.Errorf("after failure of attempt %d: %w", a.ID, MapError(err))
		}
	}
	if err := syncRechargeStatus(ctx, q, a.AccountID, StatusChangedByAttempt+status); err != nil {
		return false, false, err
	}
	return true, disabled, nil
}

// Retry is the failure ladder's next try of an episode, due At: the attempt that failed, and the
// episode and try it would open.
type Retry struct {
	AccountID string
	AttemptID int64
	Episode   int64
	Retry     int32
	At        time.Time
}

// TakeAttemptRetries takes, in tx, the failed attempts whose retry job is still to enqueue, like
// TakeAttemptJobs.
func TakeAttemptRetries(ctx context.Context, tx Tx) ([]Retry, error) {
	rows, err := dbsqlc.New(tx).RechargeAttemptsTakeRetries(ctx, outboxBatch)
	if err != nil {
		return nil, fmt.Errorf("take attempt retries: %w", MapError(err))
	}
	out := make([]Retry, len(rows))
	for i, r := range rows {
		out[i] = Retry{AccountID: r.AccountID, AttemptID: r.ID, Episode: r.Episode, Retry: r.Retry, At: r.RetryAt}
	}
	return out, nil
}

// OpenRetry opens the episode's next try after the failed try retry: at commit,
// accounts_available_watch makes the attempt if available is still below the threshold and the budget
// and cooldown allow it. opened is false when recharge is off, the episode ended, or the try is open
// already.
func OpenRetry(ctx context.Context, q Conn, accountID string, episode int64, retry int32) (opened bool, err error) {
	n, err := dbsqlc.New(q).AccountsRechargeRetry(ctx, dbsqlc.AccountsRechargeRetryParams{
		ID: accountID, Episode: episode, Retry: retry,
	})
	if err != nil {
		return false, fmt.Errorf("open retry %d of %s: %w", retry+1, accountID, MapError(err))
	}
	return n == 1, nil
}

// Block is a low-balance episode that got no attempt, and why (cooling_down, budget_exhausted).
type Block struct {
	AccountID      string
	Episode        int64
	Reason         string
	BlockedAt      time.Time
	NextEligibleAt time.Time
}

// TakeBlockNotices takes, in tx, the blocks whose recharge.blocked is still to enqueue, like
// TakeAttemptJobs.
func TakeBlockNotices(ctx context.Context, tx Tx) ([]Block, error) {
	rows, err := dbsqlc.New(tx).RechargeBlocksTakeNotices(ctx, outboxBatch)
	if err != nil {
		return nil, fmt.Errorf("take recharge blocks: %w", MapError(err))
	}
	out := make([]Block, len(rows))
	for i, r := range rows {
		out[i] = Block(r)
	}
	return out, nil
}

// outboxBatch bounds the rows one sweep takes from an outbox.
const outboxBatch = 500

// TakeAttemptJobs takes, in tx, the attempts whose PaymentIntent job is still to enqueue: they are
// marked enqueued (two sweepers never take one), and the caller enqueues their jobs in the same tx, so
// the jobs and the marks commit together.
func TakeAttemptJobs(ctx context.Context, tx Tx) ([]Attempt, error) {
	rows, err := dbsqlc.New(tx).RechargeAttemptsTakeJobs(ctx, outboxBatch)
	if err != nil {
		return nil, fmt.Errorf("take attempts to enqueue: %w", MapError(err))
	}
	out := make([]Attempt, len(rows))
	for i, r := range rows {
		out[i] = Attempt{AccountID: r.AccountID, ID: r.ID, Episode: r.Episode, Retry: r.Retry, Amount: r.Amount, CreatedAt: r.CreatedAt}
	}
	return out, nil
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
			DeclineCode: deref(r.DeclineCode), HardDecline: r.HardDecline, Retry: r.Retry, RetryAt: r.RetryAt,
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
