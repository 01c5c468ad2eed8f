package db

import (
	"context"
	"fmt"

	"github.com/onceledger/onceledger/db/internal/dbsqlc"
)

// Shared balances (SPEC §18): a member's debit is paid by its own available, then its parent's, then its
// grandparent's, in one transaction that locks them all, roots first (accounts_lock orders by depth).

// maxDepth is the deepest level of a tree: organisation 0, team 1, member 2 (accounts_depth_check).
const maxDepth = 2

// poolsOf is what readPools found: each account's parent ("" for a root) and depth.
type poolsOf struct {
	order   []string
	parents map[string]string
	depths  map[string]int32
}

// readPools reads the accounts among ids and their pools, a level at a time (accounts without a parent
// cost one statement). Accounts that do not exist are left out.
func readPools(ctx context.Context, q *dbsqlc.Queries, ids []string) (poolsOf, error) {
	out := poolsOf{parents: make(map[string]string, len(ids)), depths: make(map[string]int32, len(ids))}
	next := ids
	for level := 0; level <= maxDepth && len(next) > 0; level++ {
		rows, err := q.AccountsParents(ctx, next)
		if err != nil {
			return poolsOf{}, fmt.Errorf("read the pools of %d accounts: %w", len(next), MapError(err))
		}
		next = nil
		for _, r := range rows {
			if _, seen := out.parents[r.ID]; seen {
				continue
			}
			out.order = append(out.order, r.ID)
			out.parents[r.ID], out.depths[r.ID] = r.ParentID, r.Depth
			if r.ParentID != "" {
				if _, seen := out.parents[r.ParentID]; !seen {
					next = append(next, r.ParentID)
				}
			}
		}
	}
	return out, nil
}

// ids are the accounts and their pools, to lock together.
func (p poolsOf) ids() []string { return p.order }

// lockTree locks the accounts among ids with their pools, roots first (accounts_lock orders by depth):
// every path that may write a member's pools locks them so, before anything is written. Returns the
// pools read and the rows as locked; accounts that do not exist are left out.
func lockTree(ctx context.Context, q *dbsqlc.Queries, ids []string) (poolsOf, []dbsqlc.AccountsLockRow, error) {
	pools, err := readPools(ctx, q, ids)
	if err != nil {
		return poolsOf{}, nil, err
	}
	rows, err := lockAccounts(ctx, q, pools.ids())
	return pools, rows, err
}

// rootOf is the root of account's tree, the key its grouped authorisations gather under: read once per
// account and kept, since an account's parent is set at its creation and never changes
// (accounts_parent_immutable). An account that does not exist is its own key, and is not kept.
func (l *Ledger) rootOf(ctx context.Context, account string) (string, error) {
	if root, ok := l.roots.Load(account); ok {
		return root.(string), nil
	}
	pools, err := readPools(ctx, dbsqlc.New(l.pool), []string{account})
	if err != nil {
		return "", err
	}
	if _, ok := pools.parents[account]; !ok {
		return account, nil
	}
	root := account
	for pools.parents[root] != "" {
		root = pools.parents[root]
	}
	if l.rootsKept.Add(1) > maxRootsKept {
		// Bounded: forgetting costs one read per account, keeping every account ever seen would not be.
		l.roots.Clear()
		l.rootsKept.Store(1)
	}
	l.roots.Store(account, root)
	return root, nil
}

// maxRootsKept bounds how many accounts' roots a Ledger keeps.
const maxRootsKept = 1 << 16

// reserver plans what the levels of one account's tree reserve for its holds, in order: the account's
// own available first, then its parent's, then its grandparent's (SPEC §18). HoldsInsertGroup checks
// the plan on the locked rows.
type reserver struct {
	levels []string         // the account, then its pools, nearest first
	room   map[string]int64 // what each account has left to reserve (never below 0)
}

// roomOf is what each locked account has available to reserve (never below 0), shared by the
// reservers of one transaction's accounts: a pool's room taken for one member is gone for the next.
func roomOf(rows []dbsqlc.AccountsLockRow) map[string]int64 {
	room := make(map[string]int64, len(rows))
	for _, r := range rows {
		room[r.ID] = max(r.Balance-r.Held, 0)
	}
	return room
}

// newReserver reserves for account through room, its tree read into pools.
func newReserver(pools poolsOf, room map[string]int64, account string) reserver {
	r := reserver{room: room}
	for id := account; id != "" && len(r.levels) <= maxDepth; id = pools.parents[id] {
		r.levels = append(r.levels, id)
	}
	return r
}

// total is what the levels can still reserve together.
func (r reserver) total() int64 {
	var sum int64
	for _, id := range r.levels {
		sum += r.room[id]
	}
	return sum
}

// holdParts is what a hold reserves on its account's pools: pooled in all, and each pool's part.
type holdParts struct {
	pooled  int64
	pools   []string
	amounts []int64
}

// reserve takes amount from the levels, nearest first, and returns the pools' parts. When the levels
// cannot cover it, nothing is taken and the whole amount is planned on the account: the statement's
// condition on the locked row refuses it, unless the hold turns out to be a replay.
func (r *reserver) reserve(amount int64) holdParts {
	var parts holdParts
	if amount > r.total() {
		return parts
	}
	left := amount
	for i, id := range r.levels {
		take := min(left, r.room[id])
		r.room[id] -= take
		left -= take
		if i > 0 && take > 0 {
			parts.pooled += take
			parts.pools = append(parts.pools, id)
			parts.amounts = append(parts.amounts, take)
		}
	}
	return parts
}

// lockedTree describes the locked accounts in lockstep arrays, as LedgerAppendForDecisions reads them.
type lockedTree struct {
	ids, parents []string
	depths       []int32
	available    []int64
}

// locked describes the accounts as locked (their balance and held under the lock).
func (p poolsOf) locked(rows []dbsqlc.AccountsLockRow) lockedTree {
	var t lockedTree
	for _, r := range rows {
		t.ids = append(t.ids, r.ID)
		t.parents = append(t.parents, p.parents[r.ID])
		t.depths = append(t.depths, p.depths[r.ID])
		t.available = append(t.available, r.Balance-r.Held)
	}
	return t
}

// Member is one child of a pool, as GET /v1/accounts/{id}/members shows it.
type Member struct {
	ID      string
	Balance int64
	Held    int64
	// SpentOwn is what the member paid itself this month; DrawnFromPool what this pool paid for it.
	SpentOwn, DrawnFromPool int64
}

// Available is what the member's new holds may reserve of its own: its balance less what is held.
func (m Member) Available() int64 { return m.Balance - m.Held }

// Members returns the children of pool id with what each spent this month, its own and drawn from the
// pool; none when the account has no members (or does not exist).
func Members(ctx context.Context, q Conn, id string) ([]Member, error) {
	queries := dbsqlc.New(q)
	rows, err := queries.AccountsMembers(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("members of %s: %w", id, MapError(err))
	}
	drawn, err := queries.LedgerDrawnByMembers(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("drawn from %s: %w", id, MapError(err))
	}
	byMember := make(map[string]int64, len(drawn))
	for _, d := range drawn {
		byMember[d.Member] = d.Drawn
	}
	out := make([]Member, len(rows))
	for i, r := range rows {
		out[i] = Member{ID: r.ID, Balance: r.Balance, Held: r.Held, SpentOwn: r.SpentOwn, DrawnFromPool: byMember[r.ID]}
	}
	return out, nil
}
