package console

import (
	"fmt"
	"html/template"
	"sort"
	"strings"
	"time"

	"github.com/kyapi/kyapi/commands"
)

// chartDays is how many UTC days the account charts cover, today included.
const chartDays = 30

// chart is an SVG drawn on the server.
type chart = template.HTML

// Chart geometry, in SVG user units.
const (
	chartW, chartH         = 760.0, 220.0
	padL, padR, padT, padB = 56.0, 12.0, 12.0, 28.0
	legendRowH             = 16.0
)

// opColors give each operation a fixed colour, so charts of two accounts read the same.
var opColors = []string{"#2563eb", "#16a34a", "#d97706", "#dc2626", "#7c3aed", "#0891b2", "#db2777", "#65a30d", "#475569", "#ea580c"}

// spendChart draws the credits spent per day, one stacked bar per day, one colour per operation.
func spendChart(from time.Time, spend []commands.DaySpend) chart {
	perDay := make([]map[string]int64, chartDays)
	ops := map[string]bool{}
	for _, s := range spend {
		i := int(s.Day.Sub(from).Hours() / 24)
		if i < 0 || i >= chartDays || s.Credits <= 0 {
			continue
		}
		if perDay[i] == nil {
			perDay[i] = map[string]int64{}
		}
		perDay[i][s.Operation] += s.Credits
		ops[s.Operation] = true
	}
	names := make([]string, 0, len(ops))
	for op := range ops {
		names = append(names, op)
	}
	sort.Strings(names)
	color := map[string]string{}
	for i, op := range names {
		color[op] = opColors[i%len(opColors)]
	}
	var top int64
	for _, day := range perDay {
		var sum int64
		for _, c := range day {
			sum += c
		}
		top = max(top, sum)
	}
	legendH := legendRowH * float64((len(names)+3)/4)
	var b strings.Builder
	open(&b, "Credits spent per day by operation, last 30 days", legendH)
	top = axis(&b, top, legendH)
	plotH := chartH - padT - padB
	slot := (chartW - padL - padR) / chartDays
	for i, day := range perDay {
		y := padT + plotH
		for _, op := range names {
			c := day[op]
			if c == 0 {
				continue
			}
			h := float64(c) / float64(top) * plotH
			y -= h
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %d credits</title></rect>`,
				padL+float64(i)*slot+1, y, slot-2, h, color[op], from.AddDate(0, 0, i).Format("Jan 2"), template.HTMLEscapeString(op), c)
		}
	}
	days(&b, from)
	if len(names) == 0 {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" class="empty">No credits spent in these 30 days</text>`, chartW/2, padT+plotH/2)
	}
	for i, op := range names {
		x := padL + float64(i%4)*170
		y := chartH + legendRowH*float64(i/4) + 4
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="10" height="10" fill="%s"/><text x="%.1f" y="%.1f">%s</text>`,
			x, y, color[op], x+14, y+9, template.HTMLEscapeString(op))
	}
	b.WriteString(`</svg>`)
	return chart(b.String())
}

// balanceChart draws the balance at the end of each day: days without facts keep the balance
// of the day before (opening before the first).
func balanceChart(from time.Time, opening int64, balances []commands.DayBalance) chart {
	closing := make([]int64, chartDays)
	bal, j := opening, 0
	for i := range chartDays {
		day := from.AddDate(0, 0, i)
		for j < len(balances) && !balances[j].Day.After(day) {
			bal = balances[j].Balance
			j++
		}
		closing[i] = bal
	}
	var top int64
	for _, v := range closing {
		top = max(top, v)
	}
	var b strings.Builder
	open(&b, "Balance at the end of each day, last 30 days", 0)
	top = axis(&b, top, 0)
	plotH := chartH - padT - padB
	slot := (chartW - padL - padR) / chartDays
	points := make([]string, chartDays)
	for i, v := range closing {
		x := padL + float64(i)*slot + slot/2
		y := padT + plotH - float64(v)/float64(top)*plotH
		points[i] = fmt.Sprintf("%.1f,%.1f", x, y)
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="#2563eb"><title>%s: %d credits</title></circle>`,
			x, y, from.AddDate(0, 0, i).Format("Jan 2"), v)
	}
	fmt.Fprintf(&b, `<polyline fill="none" stroke="#2563eb" stroke-width="2" points="%s"/>`, strings.Join(points, " "))
	days(&b, from)
	b.WriteString(`</svg>`)
	return chart(b.String())
}

func open(b *strings.Builder, title string, legendH float64) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s"><title>%s</title>`,
		chartW, chartH+legendH+4, title, title)
}

// axis draws the value axis with three gridlines and returns the top of the scale (at least 1).
func axis(b *strings.Builder, top int64, _ float64) int64 {
	top = niceTop(top)
	plotH := chartH - padT - padB
	for i := 0; i <= 4; i++ {
		v := top * int64(i) / 4
		y := padT + plotH - float64(i)/4*plotH
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" class="grid"/><text x="%.1f" y="%.1f" text-anchor="end" class="tick">%d</text>`,
			padL, chartW-padR, y, y, padL-6, y+4, v)
	}
	return top
}

// days labels every fifth day under the plot.
func days(b *strings.Builder, from time.Time) {
	slot := (chartW - padL - padR) / chartDays
	for i := 0; i < chartDays; i += 5 {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" class="tick">%s</text>`,
			padL+float64(i)*slot+slot/2, chartH-padB+16, from.AddDate(0, 0, i).Format("Jan 2"))
	}
}

// niceTop rounds a maximum up to 1, 2 or 5 times a power of ten, and is at least 4 so that
// the four gridlines are whole numbers.
func niceTop(v int64) int64 {
	if v < 4 {
		return 4
	}
	p := int64(1)
	for p*10 <= v {
		p *= 10
	}
	for _, m := range []int64{1, 2, 5, 10} {
		if m*p >= v && (m*p)%4 == 0 {
			return m * p
		}
	}
	return ((v + 3) / 4) * 4
}
