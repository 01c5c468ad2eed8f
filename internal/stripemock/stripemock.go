// Package stripemock runs Stripe's own API mock (github.com/stripe/stripe-mock, pinned by the tool
// directive in go.mod) for tests that check the requests onceledger builds against Stripe's OpenAPI
// description: stripe-mock answers 400 to any parameter the real API would refuse. It is never
// Stripe; the tests that use it fail, never skip, when it cannot start.
package stripemock

import (
	"bytes"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startTimeout bounds how long Start waits for stripe-mock to listen.
const startTimeout = 3 * time.Minute

// Start runs stripe-mock on a free loopback port until the test ends and returns its base URL (for
// STRIPE_API_BASE). The binary is the one `go tool stripe-mock` runs (built on first use, then cached);
// it is started directly so that the test stops exactly the process it started.
func Start(t testing.TB) string {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("stripemock: find the module: %v", err)
	}
	tool := exec.Command("go", "tool", "-n", "stripe-mock")
	tool.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	out, err := tool.Output()
	if err != nil {
		t.Fatalf("stripemock: go tool -n stripe-mock: %v", err)
	}
	bin := strings.TrimSpace(string(out))

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	var output bytes.Buffer
	cmd := exec.Command(bin, "-http-addr", addr)
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		t.Fatalf("stripemock: start %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	// It loads Stripe's whole OpenAPI description before it listens: seconds on a quiet machine, far
	// longer on two cores busy with the rest of the suite. An exit is reported at once, with its output.
	deadline := time.Now().Add(startTimeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return "http://" + addr
		}
		select {
		case werr := <-exited:
			exited <- werr // for the cleanup
			t.Fatalf("stripemock: exited before listening on %s (%v):\n%s", addr, werr, output.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("stripemock: not listening on %s after %s: %v", addr, startTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
