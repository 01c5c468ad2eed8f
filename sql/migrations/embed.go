// Package migrations embeds the schema migrations, in golang-migrate's sequential layout,
// so that the binary carries its own schema.
package migrations

import "embed"

// FS holds every NNNNNN_name.up.sql / .down.sql file of this directory.
//
//go:embed *.sql
var FS embed.FS
