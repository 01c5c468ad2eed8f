package db_test

import "time"

var timeNow = time.Now

const parkedAfter = 24 * time.Hour
