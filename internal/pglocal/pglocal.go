// Package pglocal finds a PostgreSQL server to use when none is configured: the machine's own at
// 127.0.0.1:5432 when it answers, otherwise a private cluster it starts from the installed PostgreSQL
// binaries under a data folder of the project. It is what lets `make run` and `make test` work on a
// fresh machine with no DATABASE_URL.
package pglocal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// MachineURL is the machine's PostgreSQL server, tried first.
const MachineURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable&connect_timeout=3"

// PrivatePort is where a private cluster listens (on 127.0.0.1 only), away from the standard port.
const PrivatePort = 55432

// Server returns the URL of a server's maintenance database ("postgres"): the machine's when it
// answers, else a private cluster under dataDir, created and started as needed.
func Server(ctx context.Context, dataDir string, log *slog.Logger) (string, error) {
	if err := ping(ctx, MachineURL); err == nil {
		return MachineURL, nil
	}
	log.Info("no PostgreSQL answers at 127.0.0.1:5432; using a private cluster", "dir", dataDir, "port", PrivatePort)
	return StartPrivate(ctx, dataDir, PrivatePort, log)
}

// Database makes sure the named database exists on the server and returns its URL.
func Database(ctx context.Context, serverURL, name string) (string, error) {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", serverURL, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look for database %s: %w", name, err)
	}
	if !exists {
		// CREATE DATABASE takes no parameters; the name is quoted as an identifier.
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil && !alreadyExists(err) {
			return "", fmt.Errorf("create database %s: %w", name, err)
		}
	}
	return databaseURL(serverURL, name)
}

// databaseURL is serverURL naming the database name instead.
func databaseURL(serverURL, name string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

// alreadyExists tolerates a concurrent creation of the same database (SQLSTATE 42P04).
func alreadyExists(err error) bool { return strings.Contains(err.Error(), "42P04") }

func ping(ctx context.Context, serverURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// StartPrivate initialises (once) and starts (if not running) a cluster in dataDir/pg listening on
// 127.0.0.1:port with trust authentication, and returns its maintenance URL. PostgreSQL refuses to
// run as root, so as root the cluster is owned by and run as the "postgres" user (or "nobody").
func StartPrivate(ctx context.Context, dataDir string, port int, log *slog.Logger) (string, error) {
	return startPrivate(ctx, dataDir, port, nil, log)
}

// startPrivate is StartPrivate with extra server settings (name=value), passed as -c on every start.
func startPrivate(ctx context.Context, dataDir string, port int, settings []string, log *slog.Logger) (string, error) {
	serverURL := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=3", port)
	bin, err := binDir()
	if err != nil {
		return "", err
	}
	if err := ping(ctx, serverURL); err == nil {
		// A server started earlier with other settings (an older checkout's) is restarted with these.
		stale, err := staleSettings(ctx, serverURL, settings)
		if err != nil || stale == "" {
			return serverURL, err
		}
		log.Info("restarting the PostgreSQL on this port with the settings it lacks", "port", port, "data", stale)
		runAs, err := unprivilegedUser()
		if err != nil {
			return "", err
		}
		if err := runPG(ctx, runAs, filepath.Join(bin, "pg_ctl"), "-D", stale, "-m", "fast", "-w", "stop"); err != nil {
			return "", err
		}
	}
	dataDir, err = filepath.Abs(dataDir)
	if err != nil {
		return "", err
	}
	cluster := filepath.Join(dataDir, "pg")
	if err := os.MkdirAll(cluster, 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", cluster, err)
	}
	runAs, err := unprivilegedUser()
	if err != nil {
		return "", err
	}
	if runAs != nil {
		if err := chownTree(dataDir, runAs); err != nil {
			return "", err
		}
	}
	if _, err := os.Stat(filepath.Join(cluster, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		log.Info("initialising private PostgreSQL cluster", "dir", cluster)
		if err := runPG(ctx, runAs, filepath.Join(bin, "initdb"), "-D", cluster, "-U", "postgres",
			"--auth=trust", "--encoding=UTF8", "--no-locale"); err != nil {
			return "", err
		}
	}
	log.Info("starting private PostgreSQL cluster", "dir", cluster, "port", port)
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1", port, cluster)
	for _, setting := range settings {
		opts += " -c " + setting
	}
	if err := runPG(ctx, runAs, filepath.Join(bin, "pg_ctl"), "-D", cluster, "-l", filepath.Join(dataDir, "pg.log"),
		"-o", opts, "-w", "-t", "60", "start"); err != nil {
		return "", fmt.Errorf("%w (see %s)", err, filepath.Join(dataDir, "pg.log"))
	}
	if err := ping(ctx, serverURL); err != nil {
		return "", fmt.Errorf("private cluster started but does not answer: %w", err)
	}
	return serverURL, nil
}

// staleSettings returns the data directory of the server at serverURL when it runs without one of the
// settings (name=value), and "" when it has them all.
func staleSettings(ctx context.Context, serverURL string, settings []string) (string, error) {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, setting := range settings {
		name, want, _ := strings.Cut(setting, "=")
		var got, dir string
		err := conn.QueryRow(ctx, `SELECT current_setting($1, true), current_setting('data_directory')`, name).Scan(&got, &dir)
		if err != nil {
			return "", err
		}
		if got != want {
			return dir, nil
		}
	}
	return "", nil
}

// StopPrivate stops a private cluster started by StartPrivate.
func StopPrivate(ctx context.Context, dataDir string) error {
	bin, err := binDir()
	if err != nil {
		return err
	}
	runAs, err := unprivilegedUser()
	if err != nil {
		return err
	}
	return runPG(ctx, runAs, filepath.Join(bin, "pg_ctl"), "-D", filepath.Join(dataDir, "pg"), "-m", "fast", "-w", "stop")
}

// binDir finds the newest installed PostgreSQL's binaries: Debian keeps them out of PATH.
func binDir() (string, error) {
	if path, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(path), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return majorOf(a) - majorOf(b) })
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries found (looked for initdb in PATH and /usr/lib/postgresql/*/bin); " +
		"install PostgreSQL or set DATABASE_URL")
}

func majorOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

type account struct{ uid, gid uint32 }

// unprivilegedUser is nil unless running as root, when it is the account the cluster runs as.
func unprivilegedUser() (*account, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		return &account{uid: uint32(uid), gid: uint32(gid)}, nil
	}
	return nil, errors.New("running as root and no unprivileged user (postgres or nobody) to run PostgreSQL as")
}

func chownTree(dir string, a *account) error {
	return filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(a.uid), int(a.gid))
	})
}

func runPG(ctx context.Context, runAs *account, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if runAs != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: runAs.uid, Gid: runAs.gid}}
	}
	// pg_ctl's server outlives this process: it must not hold our output pipes open.
	out, err := os.CreateTemp("", "onceledger-pg-*.log")
	if err != nil {
		return err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		text, _ := os.ReadFile(out.Name())
		return fmt.Errorf("%s %s: %w: %s", filepath.Base(name), strings.Join(args, " "), err, strings.TrimSpace(string(text)))
	}
	return nil
}
