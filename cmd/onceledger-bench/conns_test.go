package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// conns sends the request as written, keeps its connection for the next one, reports a status not
// wanted with the answer, and sends a request again on a new connection when the server had closed
// the idle one.
func TestConnsKeepAliveAndStaleConnections(t *testing.T) {
	t.Parallel()
	var requests, dials atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("Idempotency-Key") != "k1" || string(body) != `{"amount":1}` || r.URL.Path != "/v1/x" {
			http.Error(w, "bad request: "+r.Header.Get("Idempotency-Key")+" "+string(body), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	srv.Config.IdleTimeout = 100 * time.Millisecond
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	host := strings.TrimPrefix(srv.URL, "http://")
	cs := &conns{addr: host, host: host}
	ctx := context.Background()
	header := []string{"Content-Type", "application/json", "Idempotency-Key", "k1"}
	for range 3 {
		if err := cs.do(ctx, http.MethodPost, "/v1/x", header, `{"amount":1}`, http.StatusCreated); err != nil {
			t.Fatal(err)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("3 requests in a row used %d connections, want 1", n)
	}
	err := cs.do(ctx, http.MethodPost, "/v1/x", header, `{"amount":2}`, http.StatusCreated)
	if err == nil || !strings.Contains(err.Error(), "= 400 bad request: k1 {\"amount\":2}") {
		t.Fatalf("err = %v, want the 400 and its answer", err)
	}
	time.Sleep(300 * time.Millisecond) // the server closes the idle connection
	if err := cs.do(ctx, http.MethodPost, "/v1/x", header, `{"amount":1}`, http.StatusCreated); err != nil {
		t.Fatalf("after the server closed the idle connection: %v", err)
	}
	if n, d := requests.Load(), dials.Load(); n != 5 || d != 2 {
		t.Fatalf("%d requests on %d connections, want 5 on 2", n, d)
	}
}
