package console

import (
	"fmt"
	"strings"
	"time"

	"github.com/onceledger/onceledger/db"
)

// The balance chart is SVG drawn here, on the server: a step line of the balance after each entry,
// over time, with the zero line and the extremes labelled. No script, no inline style (the CSP allows
// neither): its look is in console.css.

const (
	chartWidth  = 860
	chartHeight = 240
	// The plot's margins inside the SVG: room for the labels.
	padLeft, padRight, padTop, padBottom = 80, 16, 16, 28
)

// chart is what the account template draws.
type chart struct {
	Width, Height int
	Path          string // the step line
	Points        []chartPoint
	ZeroY         float64 // where the zero line is drawn
	Left, Right   float64 // the plot's x extent
	Top, Bottom   float64 // the plot's y extent
	MaxLabel      string
	MinLabel      string
	StartLabel    string
	EndLabel      string
	Empty         bool
}

// chartPoint marks one entry; its Title is the browser's tooltip.
type chartPoint struct {
	X, Y  float64
	Title string
}

// balanceChart draws the balances of timeline (newest first, as db.AccountTimeline returns it), from
// the balance before its oldest entry to the balance after its newest. x is time; entries that all
// happened in the same instant are spread evenly instead.
func balanceChart(timeline []db.TimelineEntry) chart {
	c := chart{Width: chartWidth, Height: chartHeight, Left: padLeft, Right: chartWidth - padRight,
		Top: padTop, Bottom: chartHeight - padBottom}
	if len(timeline) == 0 {
		c.Empty = true
		return c
	}
	oldest, newest := timeline[len(timeline)-1], timeline[0]
	opening := oldest.BalanceAfter - oldest.Amount

	low, high := min(opening, 0), max(opening, 0)
	for _, e := range timeline {
		low, high = min(low, e.BalanceAfter), max(high, e.BalanceAfter)
	}
	c.MaxLabel, c.MinLabel = groupDigits(high), groupDigits(low)
	scale := float64(max(high-low, 1))
	y := func(balance int64) float64 {
		return c.Bottom - float64(balance-low)/scale*(c.Bottom-c.Top)
	}
	start, span := oldest.CreatedAt, newest.CreatedAt.Sub(oldest.CreatedAt)
	x := func(i int, at time.Time) float64 {
		if span <= 0 {
			return c.Left + float64(i+1)/float64(len(timeline))*(c.Right-c.Left)
		}
		return c.Left + float64(at.Sub(start))/float64(span)*(c.Right-c.Left)
	}

	var path strings.Builder
	fmt.Fprintf(&path, "M %.1f %.1f", c.Left, y(opening))
	for i := range timeline {
		e := timeline[len(timeline)-1-i] // oldest first
		px, py := x(i, e.CreatedAt), y(e.BalanceAfter)
		fmt.Fprintf(&path, " H %.1f V %.1f", px, py)
		c.Points = append(c.Points, chartPoint{X: px, Y: py, Title: fmt.Sprintf("%s %s %s → %s",
			when(e.CreatedAt), e.Kind, signedAmount(e.Amount), groupDigits(e.BalanceAfter))})
	}
	fmt.Fprintf(&path, " H %.1f", c.Right)
	c.Path = path.String()
	c.ZeroY = y(0)
	c.StartLabel, c.EndLabel = when(oldest.CreatedAt), when(newest.CreatedAt)
	return c
}

// burnChart draws a pool's burn this month (SPEC §18): one bar per member, what it spent of its own
// then what it drew from the pool, all to the scale of the member that burned most.
func burnChart(members []db.Member) burn {
	b := burn{Width: chartWidth, Left: padLeft, Right: chartWidth - padRight}
	var most int64
	for _, m := range members {
		most = max(most, m.SpentOwn+m.DrawnFromPool)
	}
	if most == 0 {
		return b
	}
	scale := (b.Right - b.Left) / float64(most)
	for i, m := range members {
		bar := burnBar{ID: m.ID, Y: float64(padTop + i*burnRow), X: b.Left, OwnWidth: float64(m.SpentOwn) * scale,
			PoolWidth: float64(m.DrawnFromPool) * scale,
			Title:     fmt.Sprintf("%s: %s of its own, %s from this pool", m.ID, groupDigits(m.SpentOwn), groupDigits(m.DrawnFromPool))}
		bar.PoolX = bar.X + bar.OwnWidth
		b.Bars = append(b.Bars, bar)
	}
	b.Height = padTop + len(members)*burnRow + padBottom
	return b
}

// burnRow is the height of one member's bar and the gap below it.
const burnRow = 22

// burn is what the account template draws of a pool's members; no bars when none spent this month.
type burn struct {
	Width, Height int
	Left, Right   float64
	Bars          []burnBar
}

// burnBar is one member's: its own spending from X, then what the pool paid from PoolX.
type burnBar struct {
	ID                               string
	X, Y, OwnWidth, PoolX, PoolWidth float64
	Title                            string
}
