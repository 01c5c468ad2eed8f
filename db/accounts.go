package db

import (
	"context"
	"fmt"
	"time"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// Account is one account with its cached balance and the sum of its holds still held.
type Account struct {
	ID        string
	Currency  string
	Balance   int64
	CreatedAt time.Time
	Held      int64
	// Unit is what the balance counts: UnitCurrency (Currency's minor unit) or UnitCredits.
	Unit string
	// ParentID is the pool the account draws on when its own available runs out ("": a root).
	ParentID string
}

// Account units, as accounts_unit_check knows them.
const (
	UnitCurrency = "currency"
	UnitCredits  = "credits"
)

// Available is what new holds may still reserve: the balance less what is held.
func (a Account) Available() int64 { return a.Balance - a.Held }

// GrantKey is the dedupe key of an account's signup grant: once per account, ever.
func GrantKey(accountID string) string { return "grant:" + accountID }

// AccountCreated is the outcome of CreateAccount.
type AccountCreated struct {
	Account Account
	Created bool // this call inserted the account
	Granted bool // this call posted the signup grant
}

// CreateAccount creates the account idempotently and, when grant > 0 and this call created it, posts
// the signup grant under GrantKey in the same transaction. Concurrent or repeated calls collapse to one
// account and one grant: the primary key decides which call creates, and the grant's key guards the
// grant itself. An existing account with another currency is ErrCurrencyMismatch. The request's record
// (PendingAudit) commits with the account this call created.
func (l *Ledger) CreateAccount(ctx context.Context, id, currency string, grant int64) (AccountCreated, error) {
	return l.CreateMemberIn(ctx, id, currency, UnitCurrency, "", grant)
}

// CreateAccountIn is CreateAccount for an account counted in unit (UnitCurrency or UnitCredits). An
// existing account counted in another unit is ErrCurrencyMismatch too.
func (l *Ledger) CreateAccountIn(ctx context.Context, id, currency, unit string, grant int64) (AccountCreated, error) {
	return l.CreateMemberIn(ctx, id, currency, unit, "", grant)
}

// CreateMember is CreateAccount for an account that draws on a pool, parentID ("": a root, as
// CreateAccount).
func (l *Ledger) CreateMember(ctx context.Context, id, currency, parentID string, grant int64) (AccountCreated, error) {
	return l.CreateMemberIn(ctx, id, currency, UnitCurrency, parentID, grant)
}

// CreateMemberIn is CreateAccountIn for an account that draws on a pool, parentID ("": a root). An
// existing account with another parent is ErrParentImmutable. A new member of a parent that does not
// exist is ErrParentNotFound, of another currency or unit ErrCurrencyMismatch, below a tree's third
// level ErrTreeTooDeep: the database refuses each (trigger accounts_parent_tree).
func (l *Ledger) CreateMemberIn(ctx context.Context, id, currency, unit, parentID string, grant int64) (AccountCreated, error) {
	var out AccountCreated
	err := InAuditedTx(ctx, l.pool, func(tx Tx) (bool, error) {
		q := dbsqlc.New(tx)
		row, err := q.AccountsInsert(ctx, dbsqlc.AccountsInsertParams{ID: id, Currency: currency, Unit: unit, ParentID: parentID})
		if isNoRows(err) {
			existing, err := GetAccount(ctx, tx, id)
			if err != nil {
				return false, err
			}
			out = AccountCreated{Account: existing}
			if existing.Currency != currency {
				return false, fmt.Errorf("%w: %s is %s, asked for %s", ErrCurrencyMismatch, id, existing.Currency, currency)
			}
			if existing.Unit != unit {
				return false, fmt.Errorf("%w: %s counts %s, asked for %s", ErrCurrencyMismatch, id, existing.Unit, unit)
			}
			if existing.ParentID != parentID {
				return false, fmt.Errorf("%w: %s has parent %q, asked for %q", ErrParentImmutable, id, existing.ParentID, parentID)
			}
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("create account %s: %w", id, MapError(err))
		}
		out = AccountCreated{Account: Account(row), Created: true}
		if grant <= 0 {
			return true, nil
		}
		posted, err := l.Post(ctx, tx, Posting{
			AccountID: id, Kind: KindGrant, Amount: grant, Description: "signup grant", DedupeKey: GrantKey(id),
		})
		if err != nil {
			return false, err
		}
		out.Granted = posted.New
		if posted.New {
			out.Account.Balance = posted.Entry.BalanceAfter
		}
		return true, nil
	})
	return out, err
}

// GetAccount returns the account, or ErrNotFound.
func GetAccount(ctx context.Context, q Conn, id string) (Account, error) {
	row, err := dbsqlc.New(q).AccountsGet(ctx, id)
	if isNoRows(err) {
		return Account{}, fmt.Errorf("account %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Account{}, fmt.Errorf("get account %s: %w", id, MapError(err))
	}
	return Account(row), nil
}
