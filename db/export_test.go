package db_test

import (
	"time"

	"github.com/onceledger/onceledger/db"
)

var timeNow = time.Now

const parkedAfter = 24 * time.Hour

// ledger posts with no side effects.
var ledger db.Ledger
