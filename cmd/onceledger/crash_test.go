package main

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db/dbtest"
)

// asBinary makes this test binary run as the onceledger binary itself, so that the crash test can
// SIGKILL a real process without building another.
const asBinary = "ONCELEDGER_TEST_AS_BINARY"

func TestMain(m *testing.M) {
	if os.Getenv(asBinary) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// process is onceledger serve running as a separate process.
type process struct {
	cmd    *exec.Cmd
	stderr *output
}

func startProcess(t *testing.T, env []string) *process {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: exec.Command(self, "serve"), stderr: &output{}}
	p.cmd.Env = append([]string{asBinary + "=1"}, env...)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})
	return p
}

// waitReady polls /readyz until it answers 200; connections are refused until the process listens.
func (p *process) waitReady(t *testing.T, base string) {
	t.Helper()
	client := http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		resp, err := client.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
	}
	t.Fatalf("onceledger serve never became ready; logs:\n%s", p.stderr)
}

// kill ends the process with SIGKILL: no shutdown, no rollback by the server, in-flight requests cut.
func (p *process) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
}

// freeAddr returns a loopback address nothing listens on, to restart the server on the same one.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// The server process is SIGKILLed twice mid-load and restarted on the same address; the senders
// redeliver through the gaps, and the ledger ends exactly as expected.
func TestServerProcessKilledUnderLoad(t *testing.T) {
	t.Parallel()
	w := newWorkload(200)
	d, server, url := deliverThroughCrashes(t, w, 4, []int64{300, 650})
	t.Logf("answers: %v", d.statuses)
	if d.count("transport error") == 0 {
		t.Errorf("no delivery saw the server die: the test proves nothing")
	}
	if err := server.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := server.cmd.Wait(); err != nil {
		t.Errorf("the restarted server did not shut down cleanly: %v\n%s", err, server.stderr)
	}
	w.assertLedger(t, url)
	if t.Failed() {
		t.Logf("last server's logs:\n%s", server.stderr)
	}
}

// deliverThroughCrashes starts the server on a new database holding w's accounts, delivers w's events
// through concurrent senders, and SIGKILLs and restarts the server (on the same address) once each
// count of events in kills was delivered. It returns once every event was accepted, with the server
// then running and the database's URL.
func deliverThroughCrashes(t *testing.T, w *workload, senders int, kills []int64) (*delivery, *process, string) {
	t.Helper()
	url := dbtest.URL(t)
	w.createAccounts(t, url)
	addr := freeAddr(t)
	base := "http://" + addr
	env := []string{"DATABASE_URL=" + url, "ADDR=" + addr, "STRIPE_WEBHOOK_SECRET=" + loadSecret, "ONCELEDGER_API_KEYS=" + serveTestKey}
	server := startProcess(t, env)
	server.waitReady(t, base)

	d := &delivery{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.deliverAll(t, base, senders, d)
	}()
	for _, at := range kills {
		for deadline := time.Now().Add(time.Minute); d.delivered.Load() < at; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("only %d events delivered in a minute", d.delivered.Load())
			}
		}
		server.kill(t)
		t.Logf("SIGKILL after %d events delivered", d.delivered.Load())
		server = startProcess(t, env)
	}
	<-done
	return d, server, url
}
