package console_test

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/onceledger/onceledger/db/dbtest"
)

// logs is what the server has logged so far.
func (s *consoleServer) logs() string {
	s.t.Helper()
	logs, err := os.ReadFile(s.logFile)
	if err != nil {
		s.t.Fatal(err)
	}
	return string(logs)
}

// loggedIn is a client with a logged-in session.
func (s *consoleServer) loggedIn() *client {
	s.t.Helper()
	c := newClient(s.t, s.url, &http.Client{})
	token := c.csrfToken("/console/login")
	wantStatus(s.t, c.send(http.MethodPost, "/console/login", url.Values{"key": {apiKey}, "csrf_token": {token}}), http.StatusSeeOther, "/console/")
	return c
}

// page GETs path with the client's session and returns the status and the page.
func (c *client) page(path string) (int, string) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	req.AddCookie(c.cookie)
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// Text the database cannot hold (bytes that are not UTF-8, a NUL) in a search or in a page's id is
// the visitor's mistake: 400 for a search, 404 for a page (nothing can be stored under such an id),
// never a 500 and never an ERROR in the log.
func TestConsoleRefusesTextTheDatabaseCannotHold(t *testing.T) {
	t.Parallel()
	s := newConsoleServer(t)
	c := s.loggedIn()
	for path, want := range map[string]int{
		"/console/search?q=%FF":      http.StatusBadRequest,
		"/console/search?q=pi_%00":   http.StatusBadRequest,
		"/console/events/evt_%FF":    http.StatusNotFound,
		"/console/events/evt_%00":    http.StatusNotFound,
		"/console/accounts/acct_%FE": http.StatusNotFound,
		"/console/accounts/acct_%00": http.StatusNotFound,
	} {
		if got, body := c.page(path); got != want {
			t.Errorf("GET %s: %d, want %d\n%s", path, got, want, body)
		}
	}
	token := c.csrfToken("/console/")
	for _, action := range []string{"dry-run", "replay", "review"} {
		for _, id := range []string{"evt_%FF", "evt_%00"} {
			path := "/console/events/" + id + "/" + action
			if resp := c.send(http.MethodPost, path, url.Values{"csrf_token": {token}}); resp.StatusCode != http.StatusNotFound {
				t.Errorf("POST %s: %d, want 404", path, resp.StatusCode)
			}
		}
	}
	if logs := s.logs(); strings.Contains(logs, "level=ERROR") {
		t.Fatalf("the console logged errors for a visitor's bad input:\n%s", logs)
	}
}

var consoleLink = regexp.MustCompile(`href="(/console/(?:events|accounts)/[^"]+)"`)

// links are the console's links to event and account pages on a page, as a browser reads them.
func links(page string) []string {
	var out []string
	for _, m := range consoleLink.FindAllStringSubmatch(page, -1) {
		out = append(out, html.UnescapeString(m[1]))
	}
	return out
}

// An id may hold what a path gives a meaning to: an event id with / .. ? # and an escape sequence of
// its own, read once and never unescaped twice (Stripe's are plain, but a signed event is stored under
// whatever id it has), an account named .. (a valid account id).
// Every link to them opens their own page, and so do the forms that act on the event.
func TestConsoleLinksOpenTheirOwnPages(t *testing.T) {
	t.Parallel()
	s := newConsoleServer(t)
	const eventID, accountID = "evt_a/../b?c#d%2F", ".."
	if _, err := dbtest.Ledger(s.t, s.pool).CreateAccount(context.Background(), accountID, "gbp", 0); err != nil {
		t.Fatal(err)
	}
	s.deliver(topupEvent(eventID, "cs_odd", "pi_odd", accountID, 500))
	s.wantMoney(accountID, 500, 1)
	c := s.loggedIn()

	titles := map[string]string{"/console/events/": "Event " + eventID, "/console/accounts/": "Account " + accountID}
	opened := map[string]bool{}
	for _, from := range []string{"/console/events", "/console/search?q=pi_odd"} {
		status, page := c.page(from)
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d", from, status)
		}
		for _, link := range links(page) {
			if opened[link] {
				continue
			}
			opened[link] = true
			status, target := c.page(link)
			for prefix, title := range titles {
				if strings.HasPrefix(link, prefix) && (status != http.StatusOK || !strings.Contains(target, "<title>"+html.EscapeString(title))) {
					t.Errorf("link %s on %s opened %d, not the page of %q", link, from, status, title)
				}
			}
		}
	}
	if len(opened) < 2 {
		t.Fatalf("links followed: %v; want the event's and the account's", opened)
	}

	// The event page's forms (dry-run, replay) act on the event, and the replay's redirect shows it.
	eventPath := "/console/events/" + url.PathEscape(eventID)
	_, page := c.page(eventPath)
	token := c.csrfToken(eventPath)
	actions := regexp.MustCompile(`action="(/console/events/[^"]+)"`).FindAllStringSubmatch(page, -1)
	if len(actions) != 2 {
		t.Fatalf("%d event forms on the event's page, want dry-run and replay:\n%s", len(actions), page)
	}
	for _, a := range actions {
		action := html.UnescapeString(a[1])
		req, err := http.NewRequest(http.MethodPost, s.url+action, strings.NewReader(url.Values{"csrf_token": {token}}.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(c.cookie)
		resp, err := c.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		status, answer := resp.StatusCode, string(body)
		if location := resp.Header.Get("Location"); status == http.StatusSeeOther {
			status, answer = c.page(location)
		}
		if status != http.StatusOK || !strings.Contains(answer, "<title>"+html.EscapeString("Event "+eventID)) {
			t.Errorf("POST %s: %d, not the event's page", action, status)
		}
	}
	s.wantMoney(accountID, 500, 1)
}
