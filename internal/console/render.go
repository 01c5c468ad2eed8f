package console

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// pageNames are the templates under templates/, each rendered inside layout.html.
var pageNames = []string{"login", "overview", "events", "event", "account", "search", "drift", "audit", "finance", "error"}

func parsePages() map[string]*template.Template {
	pages := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		pages[name] = template.Must(template.New("layout.html").Funcs(templateFuncs).
			ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html"))
	}
	return pages
}

// frame is what the layout needs on every page.
type frame struct {
	Title    string
	LoggedIn bool
	CSRF     string // the session's token, for every form
	Query    string // the search box's text
}

func (c *Console) frame(r *http.Request, title string) frame {
	f := frame{Title: title}
	if sess, ok := sessionOf(r); ok {
		f.LoggedIn = sess.authenticated
		f.CSRF = c.sessions.csrfToken(sess)
	}
	return f
}

// render executes the page into a buffer first, so that a template error is a clean 500.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, data any) {
	var buf bytes.Buffer
	if err := c.pages[page].Execute(&buf, data); err != nil {
		c.Log.ErrorContext(r.Context(), "console template", "page", page, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

var templateFuncs = template.FuncMap{
	"amount":  signedAmount,
	"balance": groupDigits,
	"when":    when,
	"ago":     ago,
	"until":   until,
	"sign":    signClass,
	"segment": pathSegment,
}

// groupDigits writes minor units with thousands separators: -1234567 → "-1,234,567". Amounts are
// shown in minor units, exactly as stored: no currency exponent is guessed.
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, d := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// signedAmount is an entry's amount with its sign: "+1,500", "-300".
func signedAmount(n int64) string {
	if n > 0 {
		return "+" + groupDigits(n)
	}
	return groupDigits(n)
}

// signClass is the CSS class of an amount or balance: credits and debits read apart.
func signClass(n int64) string {
	switch {
	case n > 0:
		return "credit"
	case n < 0:
		return "debit"
	}
	return ""
}

func when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// ago is a duration (or the time since t) for a person: "45s", "12m", "3h 5m", "2d 4h".
func ago(v any) string {
	var d time.Duration
	switch v := v.(type) {
	case time.Time:
		d = time.Since(v)
	case time.Duration:
		d = v
	}
	d = max(d, 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 24*time.Hour && int(d.Minutes())%60 == 0:
		return fmt.Sprintf("%dh", int(d.Hours()))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
}

// until is how long until t, as ago writes it, or "past due" once t has passed.
func until(t time.Time) string {
	d := time.Until(t)
	if d <= 0 {
		return "past due"
	}
	return ago(d)
}
