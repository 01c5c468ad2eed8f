package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// conns sends the workloads' requests over keep-alive HTTP/1.1 connections it writes and reads
// itself, one request at a time on each. The load generator runs on the server's own cores, so its
// client's CPU is taken from the server: net/http's Transport hands every request to two goroutines
// of its connection and allocates a request, its URL and headers each time, while here a worker
// writes one buffer and reads the answer on its own goroutine, with the connection's buffers reused.
type conns struct {
	addr, host string // the server's host:port, dialled and sent as Host
	mu         sync.Mutex
	idle       []*conn
}

// conn is one connection with its buffers.
type conn struct {
	net.Conn
	r      *bufio.Reader
	w      *bufio.Writer
	answer bytes.Buffer // the last answer's body
}

const requestTimeout = 30 * time.Second

// do sends one request (header: name, value, name, value, …) and fails unless the status is one of
// want. A connection the server closed while it was idle (its IdleTimeout, between workloads) fails
// before any answer; the request is then sent once more on a new one, as net/http's Transport does.
func (cs *conns) do(ctx context.Context, method, path string, header []string, body string, want ...int) error {
	c, reused, err := cs.get(ctx)
	if err != nil {
		return err
	}
	status, err := c.roundTrip(cs.host, method, path, header, body)
	if err != nil && reused && isStale(err) {
		c.Close()
		if c, err = cs.dial(ctx); err != nil {
			return err
		}
		status, err = c.roundTrip(cs.host, method, path, header, body)
	}
	if err != nil {
		c.Close()
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	answer := bytes.TrimSpace(c.answer.Bytes())
	for _, w := range want {
		if status == w {
			cs.put(c)
			return nil
		}
	}
	err = fmt.Errorf("%s %s = %d %.512s", method, path, status, answer)
	cs.put(c)
	return err
}

// roundTrip writes the request and reads the whole answer into c.answer; it returns the status.
func (c *conn) roundTrip(host, method, path string, header []string, body string) (int, error) {
	if err := c.SetDeadline(time.Now().Add(requestTimeout)); err != nil {
		return 0, err
	}
	w := c.w
	w.WriteString(method)
	w.WriteByte(' ')
	w.WriteString(path)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(host)
	for i := 0; i+1 < len(header); i += 2 {
		w.WriteString("\r\n")
		w.WriteString(header[i])
		w.WriteString(": ")
		w.WriteString(header[i+1])
	}
	w.WriteString("\r\nContent-Length: ")
	w.WriteString(strconv.Itoa(len(body)))
	w.WriteString("\r\n\r\n")
	w.WriteString(body)
	if err := w.Flush(); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return 0, err
	}
	c.answer.Reset()
	_, err = c.answer.ReadFrom(resp.Body)
	resp.Body.Close()
	if err == nil && resp.Close {
		err = errors.New("the server closes the connection")
	}
	return resp.StatusCode, err
}

// isStale reports whether err is how a connection the server had closed fails before any answer.
func isStale(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func (cs *conns) get(ctx context.Context) (c *conn, reused bool, err error) {
	cs.mu.Lock()
	if n := len(cs.idle); n > 0 {
		c = cs.idle[n-1]
		cs.idle = cs.idle[:n-1]
	}
	cs.mu.Unlock()
	if c != nil {
		return c, true, nil
	}
	c, err = cs.dial(ctx)
	return c, false, err
}

func (cs *conns) put(c *conn) {
	cs.mu.Lock()
	cs.idle = append(cs.idle, c)
	cs.mu.Unlock()
}

func (cs *conns) dial(ctx context.Context) (*conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", cs.addr)
	if err != nil {
		return nil, err
	}
	return &conn{Conn: nc, r: bufio.NewReader(nc), w: bufio.NewWriter(nc)}, nil
}
