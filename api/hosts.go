package api

import (
	"net"
	"net/http"
	"slices"
	"strings"
)

// allowHosts answers only requests whose Host (without its port) is one of hosts, when any is given:
// a page whose site name was rebound to this server's address (DNS rebinding) sends its own name, and
// is refused 421 before any route runs.
func allowHosts(hosts []string, next http.Handler) http.Handler {
	if len(hosts) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if !slices.Contains(hosts, strings.ToLower(strings.Trim(host, "[]"))) {
			writeJSON(w, http.StatusMisdirectedRequest, errorBody{Error: errorInfo{Code: "host_not_allowed",
				Message: "this server does not answer for that host name (ALLOWED_HOSTS)"}})
			return
		}
		next.ServeHTTP(w, r)
	})
}
