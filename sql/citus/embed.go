// Package citus embeds the schema changes that `onceledger migrate up` makes, after the migrations, on a
// database with the citus extension (SPEC §15). Plain PostgreSQL never runs them.
package citus

import _ "embed"

// Prepare reworks the migrated schema for distribution, once, before the tables are distributed.
//
//go:embed prepare.sql
var Prepare string
