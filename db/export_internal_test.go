package db

import (
	"context"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// AddGroupToBalance runs a group's balance update as if its plan had admitted every posting, whatever
// the locked balance: the plan of a planner that admits too much.
func AddGroupToBalance(ctx context.Context, tx Tx, postings []Posting) error {
	q := dbsqlc.New(tx)
	start, err := q.AccountsLockForGroup(ctx, postings[0].AccountID)
	if err != nil {
		return err
	}
	group := make([]*member, len(postings))
	plan := groupPlan{balance: start}
	for i, p := range postings {
		group[i] = &member{posting: p}
		plan.insert = append(plan.insert, i)
		plan.balance += p.Amount
	}
	return addGroupToBalance(ctx, q, group, plan)
}
