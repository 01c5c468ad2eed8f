package db_test

import (
	"time"

	"github.com/onceledger/onceledger/db"
)

var timeNow = time.Now

const parkedAfter = 24 * time.Hour

// ledger posts in a transaction (Post) with no side effects; a test that needs the Ledger of its
// database (groups, its own transactions) builds one with dbtest.Ledger.
var ledger = new(db.Ledger)

// withGroups is cfg grouping as o says.
func withGroups(cfg db.LedgerConfig, o db.GroupOptions) db.LedgerConfig {
	cfg.Groups = o
	return cfg
}
