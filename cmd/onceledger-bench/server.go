package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// server is the real onceledger binary, run as its own process so that its memory is its own.
type server struct {
	cmd     *exec.Cmd
	base    string
	ready   time.Duration // from process start to the first /readyz = 200
	logs    *tail
	peakRSS peak
}

var listening = regexp.MustCompile(`listening on (http://\S+)`)

// startServer starts `onceledger serve` on a free loopback port and waits for /readyz.
func startServer(ctx context.Context, bin string, env []string) (*server, error) {
	s := &server{logs: &tail{}}
	s.cmd = exec.Command(bin, "serve")
	s.cmd.Env = append(env, "ADDR=127.0.0.1:0")
	s.cmd.Stderr = s.logs
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	started := time.Now()
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s serve: %w", bin, err)
	}
	addr := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			if m := listening.FindStringSubmatch(lines.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	select {
	case s.base = <-addr:
	case <-time.After(30 * time.Second):
		s.stop()
		return nil, fmt.Errorf("serve did not listen within 30s; logs:\n%s", s.logs)
	}
	for {
		resp, err := http.Get(s.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				s.ready = time.Since(started)
				break
			}
		}
		if time.Since(started) > 30*time.Second {
			s.stop()
			return nil, fmt.Errorf("/readyz not 200 within 30s; logs:\n%s", s.logs)
		}
		time.Sleep(2 * time.Millisecond)
	}
	go s.sampleRSS(ctx)
	return s, nil
}

// sampleRSS keeps the highest resident set seen, as a check on VmHWM.
func (s *server) sampleRSS(ctx context.Context) {
	for ctx.Err() == nil {
		if kb, err := s.statusKB("VmRSS"); err == nil {
			s.peakRSS.observe(kb)
		} else {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// statusKB reads one kB field of /proc/<pid>/status (VmRSS, VmHWM).
func (s *server) statusKB(field string) (int64, error) {
	body, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc status", field)
}

// cpuTime is the CPU time the process pid has used so far (user and system, /proc/<pid>/stat):
// differences over a workload, divided by its requests, give the CPU per request, which moves far less
// than throughput when other work shares the machine.
func cpuTime(pid int) (time.Duration, error) {
	body, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; the fields after its closing parenthesis do not.
	fields := strings.Fields(string(body[strings.LastIndexByte(string(body), ')')+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("short /proc stat: %q", body)
	}
	var ticks int64
	for _, f := range fields[11:13] { // utime, stime: fields 14 and 15 of the whole line
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on Linux.
const clockTicks = 100

// cpuPerOp runs measured and notes the CPU per successful operation of the server and of this
// process, the load generator, whose HTTP client shares the machine's cores with the server.
func (s *server) cpuPerOp(measured func() result) (result, string) {
	pids := []int{s.cmd.Process.Pid, os.Getpid()}
	var before, after [2]time.Duration
	for i, pid := range pids {
		before[i], _ = cpuTime(pid)
	}
	r := measured()
	for i, pid := range pids {
		after[i], _ = cpuTime(pid)
	}
	if r.ops == 0 || before[0] == 0 || after[0] == 0 {
		return r, ""
	}
	perOp := func(i int) float64 { return float64(after[i]-before[i]) / float64(time.Microsecond) / float64(r.ops) }
	return r, fmt.Sprintf("CPU per request: server %.0f µs, load generator %.0f µs", perOp(0), perOp(1))
}

// stop asks the server to shut down gracefully and waits for it.
func (s *server) stop() error {
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		return errors.New("serve did not stop within 30s")
	}
}

// tail keeps the last lines a process wrote, for error messages.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 16<<10 {
		t.buf = t.buf[len(t.buf)-8<<10:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// peak keeps the highest value observed, from any goroutine.
type peak struct{ v atomic.Int64 }

func (p *peak) observe(v int64) {
	for {
		cur := p.v.Load()
		if v <= cur || p.v.CompareAndSwap(cur, v) {
			return
		}
	}
}

func (p *peak) get() int64 { return p.v.Load() }
