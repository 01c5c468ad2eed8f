package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/onceledger/onceledger/db"
)

func migrateCmd(ctx context.Context, e env, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("migrate needs up, down N or version: %w", errUsage)
	}
	url, err := e.databaseURL(ctx)
	if err != nil {
		return err
	}
	ms, err := db.OpenMigrations(url)
	if err != nil {
		return err
	}
	defer ms.Close()

	switch args[0] {
	case "up":
		if err := ms.Up(); err != nil {
			return err
		}
	case "down":
		if len(args) != 2 {
			return fmt.Errorf("migrate down needs the number of steps: %w", errUsage)
		}
		n, err := strconv.Atoi(args[1])
		if err != nil || n <= 0 {
			return fmt.Errorf("migrate down: %q is not a positive number: %w", args[1], errUsage)
		}
		if err := ms.Down(n); err != nil {
			return err
		}
	case "version":
	default:
		return fmt.Errorf("migrate %q: %w", args[0], errUsage)
	}
	v, dirty, err := ms.Version()
	if err != nil {
		return err
	}
	river, err := ms.RiverVersion()
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "schema version %d (dirty=%t)\n", v, dirty)
	fmt.Fprintf(e.stdout, "job queue (river) version %d\n", river)
	return nil
}
