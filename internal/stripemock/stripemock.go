// Package stripemock runs Stripe's own API mock (github.com/stripe/stripe-mock, pinned by the tool
// directive in go.mod) for tests that check the requests onceledger builds against Stripe's OpenAPI
// description: stripe-mock answers 400 to any parameter the real API would refuse. It is never
// Stripe; the tests that use it fail, never skip, when it cannot start.
package stripemock

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// startTimeout bounds how long Start waits for stripe-mock to listen.
const startTimeout = 3 * time.Minute

// listening is the line stripe-mock prints once it listens for HTTP.
var listening = regexp.MustCompile(`Listening for HTTP at address: (\S+)`)

// Start runs stripe-mock on a loopback port until the test ends and returns its base URL (for
// STRIPE_API_BASE). The binary is the one `go tool stripe-mock` runs (built on first use, then cached);
// it is started directly so that the test stops exactly the process it started. stripe-mock binds the
// ports the system picks, HTTP and HTTPS, and prints its HTTP address: no port is chosen before it
// binds, so none can be taken meanwhile by another test, or another stripe-mock.
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

	output := &syncBuffer{}
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = output, output
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
		if m := listening.FindStringSubmatch(output.String()); m != nil {
			return "http://" + m[1]
		}
		select {
		case werr := <-exited:
			exited <- werr // for the cleanup
			t.Fatalf("stripemock: exited before listening (%v):\n%s", werr, output.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("stripemock: not listening after %s:\n%s", startTimeout, output.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// syncBuffer is the process's output, written by its pipes' goroutines and read by Start.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
