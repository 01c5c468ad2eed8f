package db

import (
	"context"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// InsertGroupAsAdmitted runs a group's insert as if its plan had admitted every posting, whatever the
// locked balance: the plan of a planner that admits too much. A refused insert returns an error.
func InsertGroupAsAdmitted(ctx context.Context, tx Tx, postings []Posting) error {
	q := dbsqlc.New(tx)
	if _, err := q.AccountsLockForGroup(ctx, postings[0].AccountID); err != nil {
		return err
	}
	group := make([]*member, len(postings))
	var insert []int
	for i, p := range postings {
		group[i] = &member{req: p}
		insert = append(insert, i)
	}
	_, err := insertGroup(ctx, q, group, insert)
	return err
}

// CheckoutsWaiting is how many deliveries wait for g's next group.
func CheckoutsWaiting(g *CheckoutGrouper) int {
	g.queue.mu.Lock()
	defer g.queue.mu.Unlock()
	if q := g.queue.queues[""]; q != nil {
		return len(q.waiting)
	}
	return 0
}
