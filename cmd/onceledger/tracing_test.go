package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/onceledger/onceledger/db/dbtest"
)

// collector is a stand-in OTLP/HTTP collector that counts the batches of spans posted to it.
func collector(t *testing.T) (url string, posts *atomic.Int64) {
	t.Helper()
	posts = &atomic.Int64{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			posts.Add(1)
		}
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(srv.Close) // registered first, so closed after serve stopped
	return srv.URL, posts
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, serve sends the spans of its requests to the collector there,
// the last of them when it shuts down; with tracing turned off by the standard variables, the same
// endpoint receives nothing, and no exporter is started.
func TestServeSendsSpansToTheConfiguredCollector(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		vars map[string]string
		on   bool
	}{
		{"on", map[string]string{}, true},
		{"disabled", map[string]string{"OTEL_SDK_DISABLED": "true"}, false},
		{"no exporter", map[string]string{"OTEL_TRACES_EXPORTER": "none"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, posts := collector(t)
			stderr := &output{}
			// Registered before serve starts, so run after it stopped and sent its last spans.
			t.Cleanup(func() {
				if got := posts.Load() > 0; got != tc.on {
					t.Errorf("the collector received %d batches of spans; want some: %t", posts.Load(), tc.on)
				}
				if got := strings.Contains(stderr.String(), `"msg":"tracing"`); got != tc.on {
					t.Errorf("serve logged that tracing started: %t, want %t; logs:\n%s", got, tc.on, stderr)
				}
			})
			tc.vars["DATABASE_URL"] = dbtest.URL(t)
			tc.vars["DB_MAX_CONNS"] = "4" // enough for the job queue; the health check needs none
			tc.vars["OTEL_EXPORTER_OTLP_ENDPOINT"] = url
			base := startServeWithErrors(t, tc.vars, &output{}, stderr)
			resp, err := http.Get(base + "/healthz")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		})
	}
}
