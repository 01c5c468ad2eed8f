package console_test

import (
	"net/http"
	"strings"
	"testing"
)

// The account page's entries show who spent and on what: a hold's capture carries its hold's subject and
// feature in the last two columns, an entry that names neither leaves them empty.
func TestConsoleEntriesShowSubjectAndFeature(t *testing.T) {
	t.Parallel()
	s := newConsoleServer(t)
	s.call(http.MethodPut, "/v1/accounts/acct_sf", `{"currency":"usd"}`, "")
	s.call(http.MethodPost, "/v1/accounts/acct_sf/adjustments", `{"amount":1000}`, "opening")
	s.call(http.MethodPost, "/v1/accounts/acct_sf/holds", `{"id":"h1","amount":100,"subject":"agent-7","feature":"chat"}`, "")
	s.call(http.MethodPost, "/v1/accounts/acct_sf/holds/h1/capture", `{"amount":40}`, "")

	status, page := s.loggedIn().page("/console/accounts/acct_sf")
	if status != http.StatusOK {
		t.Fatalf("account page: %d", status)
	}
	_, timeline, _ := strings.Cut(page, `<table id="timeline">`)
	timeline, _, _ = strings.Cut(timeline, "</table>")
	rows := strings.Split(timeline, "<tr>")[2:] // after the header's
	if len(rows) != 2 {
		t.Fatalf("%d entries on the page, want 2:\n%s", len(rows), timeline)
	}
	for _, c := range []struct{ row, key, cells string }{
		{rows[0], "hold:acct_sf:h1", `<td class="mono">agent-7</td><td class="mono">chat</td>`},
		{rows[1], "api:acct_sf:opening", `<td class="mono"></td><td class="mono"></td>`},
	} {
		row, _, _ := strings.Cut(c.row, "</tr>")
		if !strings.Contains(row, c.key) || !strings.HasSuffix(row, c.cells) {
			t.Errorf("entry %s shows\n%s\nwant it to end %s", c.key, c.row, c.cells)
		}
	}
}

// The account page shows the pool an account draws on and, for a pool, its members with this month's
// spending, their own and drawn from the pool (SPEC §18).
func TestConsoleAccountShowsPoolAndMembers(t *testing.T) {
	t.Parallel()
	s := newConsoleServer(t)
	s.call(http.MethodPut, "/v1/accounts/org", `{"currency":"usd"}`, "")
	s.call(http.MethodPut, "/v1/accounts/alice", `{"currency":"usd","parent_id":"org"}`, "")
	s.call(http.MethodPost, "/v1/accounts/alice/adjustments", `{"amount":1000}`, "opening")
	s.call(http.MethodPost, "/v1/accounts/org/adjustments", `{"amount":2000}`, "funding")
	// A hold past alice's own 1,000, captured: 1,000 of her own, 500 from the pool.
	s.call(http.MethodPost, "/v1/accounts/alice/holds", `{"id":"h1","amount":1500}`, "")
	s.call(http.MethodPost, "/v1/accounts/alice/holds/h1/capture", `{}`, "")

	c := s.loggedIn()
	_, page := c.page("/console/accounts/org")
	_, members, _ := strings.Cut(page, `<table id="members">`)
	members, _, _ = strings.Cut(members, "</table>")
	if !strings.Contains(members, `<a href="/console/accounts/alice">alice</a></td><td class="r">0</td>`) ||
		!strings.Contains(members, `<td class="r">1,000</td><td class="r">500</td></tr>`) {
		t.Fatalf("org's members:\n%s", members)
	}
	_, burn, _ := strings.Cut(page, `<svg class="chart" id="burn-chart"`)
	burn, _, _ = strings.Cut(burn, "</svg>")
	if strings.Count(burn, "<title>alice: 1,000 of its own, 500 from this pool</title>") != 2 {
		t.Fatalf("org's burn chart:\n%s", burn)
	}
	_, alice := c.page("/console/accounts/alice")
	if !strings.Contains(alice, `Draws on <a class="mono" href="/console/accounts/org">org</a>`) {
		t.Fatalf("alice's page names no pool:\n%s", alice)
	}
}
