package console

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/onceledger/onceledger/db"
)

// The chart runs from the balance before the oldest entry shown to the balance after the newest, its
// scale spans zero and both extremes, and a balance below zero is drawn below the zero line.
func TestBalanceChart(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	timeline := []db.TimelineEntry{ // newest first, as db.AccountTimeline answers
		{Entry: db.Entry{Kind: db.KindDispute, Amount: -700, CreatedAt: at.Add(2 * time.Hour)}, BalanceAfter: -200},
		{Entry: db.Entry{Kind: db.KindTopup, Amount: 400, CreatedAt: at}, BalanceAfter: 500},
	}
	c := balanceChart(timeline)
	if c.Empty || len(c.Points) != 2 {
		t.Fatalf("chart %+v, want two points", c)
	}
	if c.MaxLabel != "500" || c.MinLabel != "-200" {
		t.Fatalf("labels %s..%s, want -200..500", c.MinLabel, c.MaxLabel)
	}
	// The line opens at the balance before the top-up (100), at the left edge.
	opening := c.Bottom - float64(100+200)/700*(c.Bottom-c.Top)
	if want := fmt.Sprintf("M %.1f %.1f H", c.Left, opening); !strings.HasPrefix(c.Path, want) {
		t.Fatalf("path %q does not open at the balance 100 (y %.1f)", c.Path, opening)
	}
	if first, last := c.Points[0], c.Points[1]; first.X != c.Left || last.X != c.Right || last.Y <= c.ZeroY || first.Y >= c.ZeroY {
		t.Fatalf("points %+v with zero at %.1f: want the top-up at the left above zero, the dispute at the right below", c.Points, c.ZeroY)
	}
	if empty := balanceChart(nil); !empty.Empty {
		t.Fatal("a chart of no entries is not empty")
	}
}
