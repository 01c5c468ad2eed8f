// Package citus embeds the schema changes that `onceledger migrate up` makes, after the migrations, on a
// database with the citus extension (SPEC §15), on every run. Plain PostgreSQL never runs them.
package citus

import _ "embed"

// Prepare reworks the migrated schema for distribution, before the tables are distributed; running it
// again changes nothing but the Citus forms of functions a later migration replaced.
//
//go:embed prepare.sql
var Prepare string
