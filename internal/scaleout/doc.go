// Package scaleout holds the exactly-once suite run against a Citus cluster (SPEC §15): its tests build
// only with the citus tag (`make test-citus`), which starts a coordinator and two workers (pglocal),
// migrates a fresh database on them (the distribute step included) and runs them against the
// coordinator, then verify.
package scaleout
