package api

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/config"
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
// routed, so the document cannot drift from the code. The console's pages are HTML for people, not
// part of the API's document.
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
	for _, route := range walkRoutes(t) {
		if route.path == "/console" || strings.HasPrefix(route.path, "/console/") {
			continue
		}
		for _, m := range route.methods {
			if m != http.MethodHead { // every GET route takes HEAD; the document lists GET
				routed[m+" "+route.path] = true
			}
		}
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

// TestOpenAPIDeclaresSecurityAndRefusals: every operation says who may call it (security, [] when the
// route is open) and lists at least one 4xx answer, and every tag is described, so a reader (or a
// linter) never has to guess which routes are open.
func TestOpenAPIDeclaresSecurityAndRefusals(t *testing.T) {
	t.Parallel()
	doc, err := loadDocument()
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.Security == nil {
				missing = append(missing, method+" "+path+": no security (declare security: [] on an open route)")
			}
			for _, req := range derefSecurity(op.Security) {
				for scheme := range req {
					if doc.Components.SecuritySchemes[scheme] == nil {
						missing = append(missing, method+" "+path+": unknown security scheme "+scheme)
					}
				}
			}
			has4xx := false
			for status := range op.Responses.Map() {
				has4xx = has4xx || strings.HasPrefix(status, "4")
			}
			if !has4xx {
				missing = append(missing, method+" "+path+": no 4xx answer listed")
			}
		}
	}
	for _, tag := range doc.Tags {
		if tag.Description == "" {
			missing = append(missing, "tag "+tag.Name+": no description")
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Fatalf("openapi.yaml:\n  %s", strings.Join(missing, "\n  "))
	}
	if webhook := doc.Paths.Find("/webhooks/stripe").Post; webhook.Security == nil || len(*webhook.Security) != 1 || (*webhook.Security)[0]["stripeSignature"] == nil {
		t.Fatal("the webhook must declare its signature scheme")
	}
}

func derefSecurity(s *openapi3.SecurityRequirements) openapi3.SecurityRequirements {
	if s == nil {
		return nil
	}
	return *s
}

func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	got := s.call(http.MethodGet, "/openapi.yaml", nil).want(t, http.StatusOK, "")
	if string(got.Body) != string(openAPIDocument) {
		t.Fatal("GET /openapi.yaml does not serve the embedded document")
	}
}

// TestOpenAPIScopesMatchRouter: the scope each operation's security names is the one its route asks
// for. Every guarded operation is called with a key holding that scope alone (let past the guard) and
// with a key holding every other scope but admin (403 insufficient_scope).
func TestOpenAPIScopesMatchRouter(t *testing.T) {
	t.Parallel()
	doc, err := loadDocument()
	if err != nil {
		t.Fatal(err)
	}
	scopes := []string{"read", "spend", "credit", "operate", "admin"}
	secret := func(scope string, alone bool) string {
		return fmt.Sprintf("%s_%t_onceledger_scope_tests_0000000", scope, alone)
	}
	var entries []string
	for _, scope := range scopes[:4] {
		var others []string
		for _, s := range scopes[:4] {
			if s != scope {
				others = append(others, s)
			}
		}
		entries = append(entries, "only-"+scope+":"+scope+":"+secret(scope, true),
			"all-but-"+scope+":"+strings.Join(others, "+")+":"+secret(scope, false))
	}
	entries = append(entries, "only-admin:admin:"+secret("admin", true), "all-but-admin:read+spend+credit+operate:"+secret("admin", false))
	s := newServerWith(t, dbtest.New(t), func(*Deps) {}, func(c *config.Config) { c.APIKeys = testKeys(t, entries...) })

	send := func(method, path, key string) int {
		req, err := http.NewRequest(method, s.url+path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "scope-probe")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	checked := 0
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.Security == nil || len(*op.Security) == 0 {
				continue
			}
			named := (*op.Security)[0]["bearer"]
			if len(named) != 1 {
				continue // the webhook's signature
			}
			probe := routeVar.ReplaceAllString(path, "scope_probe")
			if got := send(method, probe, secret(named[0], true)); got == http.StatusForbidden || got == http.StatusUnauthorized {
				t.Errorf("%s %s documents scope %s, but a key holding it alone is answered %d", method, path, named[0], got)
			}
			if got := send(method, probe, secret(named[0], false)); got != http.StatusForbidden {
				t.Errorf("%s %s documents scope %s, but a key holding every other is answered %d", method, path, named[0], got)
			}
			checked++
		}
	}
	if checked < 20 {
		t.Fatalf("%d guarded operations checked", checked)
	}
}
