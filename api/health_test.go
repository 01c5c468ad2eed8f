package api

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// /readyz asks the database once in a while, not once a probe: a probe right after a check gets that
// check's answer (still 200 after the schema was marked dirty), and a later one sees the change.
func TestReadyzCachesItsDatabaseCheck(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.call(http.MethodGet, "/readyz", nil).want(t, http.StatusOK, "")
	if _, err := s.pool.Exec(context.Background(), `UPDATE schema_migrations SET dirty = true`); err != nil {
		t.Fatal(err)
	}
	s.call(http.MethodGet, "/readyz", nil).want(t, http.StatusOK, "")
	deadline := time.Now().Add(10 * time.Second)
	for s.call(http.MethodGet, "/readyz", nil).Status != http.StatusServiceUnavailable {
		if time.Now().After(deadline) {
			t.Fatal("/readyz still 200 10 s after the schema was marked dirty: the cached answer never expires")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
