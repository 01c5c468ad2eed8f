package api

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/gorilla/mux"
)

func TestOpenAPIDocumentLoads(t *testing.T) {
	t.Parallel()
	doc, err := loadDocument()
	if err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q, want 3.1.0", doc.OpenAPI)
	}
}

// TestOpenAPIMatchesRouter: every route in routes.go is documented, and every documented route is
// routed, so the document cannot drift from the code.
func TestOpenAPIMatchesRouter(t *testing.T) {
	t.Parallel()
	doc, err := loadDocument()
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}
	routed := map[string]bool{}
	router := NewHandler(Deps{}).(*mux.Router)
	err = router.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		path, err := route.GetPathTemplate()
		if err != nil {
			return err
		}
		methods, err := route.GetMethods()
		if err != nil {
			return nil // a prefix (the /v1 subrouter), not an endpoint
		}
		for _, m := range methods {
			routed[m+" "+path] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	var diffs []string
	for r := range routed {
		if !documented[r] {
			diffs = append(diffs, "routed but not documented: "+r)
		}
	}
	for r := range documented {
		if !routed[r] {
			diffs = append(diffs, "documented but not routed: "+r)
		}
	}
	slices.Sort(diffs)
	if len(diffs) > 0 {
		t.Fatalf("openapi.yaml and routes.go differ:\n  %s", strings.Join(diffs, "\n  "))
	}
}

func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	got := s.call(http.MethodGet, "/openapi.yaml", nil).want(t, http.StatusOK, "")
	if string(got.Body) != string(openAPIDocument) {
		t.Fatal("GET /openapi.yaml does not serve the embedded document")
	}
}
