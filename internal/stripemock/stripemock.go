// Package stripemock runs Stripe's own API mock (github.com/stripe/stripe-mock, pinned by the tool
// directive in go.mod) for tests that check the requests onceledger builds against Stripe's OpenAPI
// description: stripe-mock answers 400 to any parameter the real API would refuse. It is never
// Stripe; the tests that use it fail, never skip, when it cannot start.
package stripemock

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
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
	// The port is free when chosen, not necessarily when stripe-mock binds it: another test's server
	// may take it meanwhile, and stripe-mock then exits while the other answers. So the answer must be
	// stripe-mock's, else it starts again on another port.
	for attempt := 1; ; attempt++ {
		url, ok := start(t, bin)
		if ok {
			return url
		}
		if attempt == 5 {
			t.Fatalf("stripemock: something else answered on %d ports in a row", attempt)
		}
	}
}

// start runs stripe-mock once on a free port and waits until it answers; ok is false when something
// else answered there (the process is stopped then).
func start(t testing.TB, bin string) (url string, ok bool) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	var output bytes.Buffer
	// stripe-mock also listens for HTTPS, on its default port unless told otherwise: where two run at
	// once (tests of several packages) the second would exit. The system picks its port instead.
	cmd := exec.Command(bin, "-http-addr", addr, "-https-addr", "127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		t.Fatalf("stripemock: start %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	// It loads Stripe's whole OpenAPI description before it listens: seconds on a quiet machine, far
	// longer on two cores busy with the rest of the suite. An exit is reported at once, with its output.
	url = "http://" + addr
	deadline := time.Now().Add(startTimeout)
	for {
		switch answered, isMock := probe(url); {
		case isMock:
			t.Cleanup(stop)
			return url, true
		case answered:
			stop()
			return "", false
		}
		select {
		case werr := <-exited:
			exited <- werr // for stop
			t.Fatalf("stripemock: exited before listening on %s (%v):\n%s", addr, werr, output.String())
		default:
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("stripemock: not listening on %s after %s", addr, startTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// probe asks url for a list of charges, as a Stripe client would: answered is true when anything
// answered, isMock when the answer is a Stripe list.
func probe(url string) (answered, isMock bool) {
	req, err := http.NewRequest(http.MethodGet, url+"/v1/charges?limit=1", nil)
	if err != nil {
		return false, false
	}
	req.Header.Set("Authorization", "Bearer sk_test_stripemock")
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return false, false
	}
	defer resp.Body.Close()
	var list struct {
		Object string `json:"object"`
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list)
	return true, resp.StatusCode == http.StatusOK && err == nil && list.Object == "list"
}
