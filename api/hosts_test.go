package api

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/onceledger/onceledger/internal/config"
)

// With ALLOWED_HOSTS, a request for another host name (a rebound DNS name) is refused 421 before any
// route runs; the allowed names, with or without a port, are answered. Without it, every name is.
func TestAllowedHosts(t *testing.T) {
	t.Parallel()
	h := NewHandler(Deps{Config: config.Config{AllowedHosts: []string{"127.0.0.1", "localhost", "::1"}}})
	for host, want := range map[string]int{
		"127.0.0.1:8080": http.StatusOK, "localhost": http.StatusOK, "[::1]:8080": http.StatusOK,
		"attacker.example": http.StatusMisdirectedRequest, "attacker.example:8080": http.StatusMisdirectedRequest,
	} {
		req := httptest.NewRequest(http.MethodGet, "/healthz", nil)
		req.Host = host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != want {
			t.Errorf("Host %s: %d, want %d", host, w.Code, want)
		}
	}
	req := httptest.NewRequest(http.MethodGet, "/healthz", nil)
	req.Host = "anything.example"
	w := httptest.NewRecorder()
	NewHandler(Deps{}).ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Errorf("without ALLOWED_HOSTS: %d", w.Code)
	}
}
