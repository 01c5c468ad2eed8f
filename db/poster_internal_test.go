package db

import (
	"errors"
	"testing"
)

// Admission follows arrival order against the locked balance, and a refused member claims no key,
// exactly as a sequence of single transactions would.
func TestPlanGroupAdmitsInArrivalOrder(t *testing.T) {
	t.Parallel()
	debit := func(key string, amount int64) *member {
		return &member{req: Posting{AccountID: "a", Kind: KindAdjustment, Amount: amount, DedupeKey: key, NoOverdraw: true}}
	}
	group := []*member{
		debit("k1", -60), // 100 → 40
		debit("k2", -60), // refused at 40
		debit("k3", 50),  // 40 → 90
		debit("k2", -60), // its first claim was refused, so it is evaluated afresh: 90 → 30
		debit("k3", 50),  // replay of the member two above
		debit("k3", 51),  // conflict with it
		debit("old", 5),  // replay of a stored entry
		debit("", -31),   // refused at 30
	}
	stored := map[string]Entry{"old": {ID: 7, AccountID: "a", Kind: KindAdjustment, Amount: 5, DedupeKey: "old"}}
	plan := planGroup(group, 100, stored)

	if want := []int{0, 2, 3}; len(plan.insert) != len(want) || plan.insert[0] != 0 || plan.insert[1] != 2 || plan.insert[2] != 3 {
		t.Fatalf("inserted members %v, want %v", plan.insert, want)
	}
	if plan.balance != 30 {
		t.Fatalf("planned balance %d, want 30", plan.balance)
	}
	for _, i := range []int{1, 7} {
		if !errors.Is(plan.outcomes[i].err, ErrInsufficientBalance) {
			t.Fatalf("member %d = %v, want ErrInsufficientBalance", i, plan.outcomes[i].err)
		}
	}
	if plan.duplicateOf[4] != 2 || plan.duplicateOf[5] != 2 || len(plan.duplicateOf) != 2 {
		t.Fatalf("duplicates %v, want members 4 and 5 of member 2", plan.duplicateOf)
	}
	if o := plan.outcomes[6]; o.err != nil || o.ans.New || o.ans.Entry.ID != 7 {
		t.Fatalf("replay of a stored key = %+v, want posted=false with entry 7", o)
	}
}
