// Command citus-cluster starts or stops a local Citus cluster for onceledger (SPEC §15): a coordinator and
// two workers as private PostgreSQL clusters under .data/citus on 127.0.0.1:55440-55442.
//
//	citus-cluster up [-db NAME]   start the nodes, make the database on each, print its DATABASE_URL
//	citus-cluster down            stop the nodes
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/onceledger/onceledger/internal/pglocal"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "citus-cluster:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("citus-cluster", flag.ContinueOnError)
	dataDir := fs.String("data", ".data", "folder holding the nodes (under citus/)")
	name := fs.String("db", "onceledger", "database to make on every node")
	if len(args) == 0 {
		return fmt.Errorf("usage: citus-cluster up [-db NAME] | down")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	switch args[0] {
	case "up":
		c, err := pglocal.StartCluster(ctx, *dataDir, log)
		if err != nil {
			return err
		}
		url, err := c.Database(ctx, *name)
		if err != nil {
			return err
		}
		fmt.Println(url)
		return nil
	case "down":
		return pglocal.StopCluster(ctx, *dataDir)
	default:
		return fmt.Errorf("unknown command %q: usage: citus-cluster up [-db NAME] | down", args[0])
	}
}
