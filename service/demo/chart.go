package demo

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Chart geometry, in SVG user units.
const (
	chartW, chartH                = 840, 460
	padL, padR, padT, padB        = 70, 230, 50, 60
	plotW, plotH                  = chartW - padL - padR, chartH - padT - padB
	maxChartPoints                = 600
	chartTicks                    = 5
	colorLimit                    = "#444444"
	colorGrid                     = "#e5e5e5"
	colorLocal, colorShared       = "#d62728", "#2ca02c"
	colorNaive, colorAtomic       = "#ff7f0e", "#1f77b4"
	seriesIDPrefix, limitLineID   = "series-", "limit"
	chartFont                     = "font-family=\"sans-serif\""
	chartTitleSize, chartTextSize = 16, 12
)

// chartSeries is one line of the chart.
type chartSeries struct {
	id, label, color string
	cumulative       []int
	admitted         int
}

// writeChart draws the cumulative admitted requests of the report's runs
// (for race mode: the last naive attempt and the atomic run) against the
// request count, with the limit as a dashed line, as an SVG file.
func writeChart(path string, rep *Report) error {
	var series []chartSeries
	pick := func(name, color string) {
		for i := len(rep.Runs) - 1; i >= 0; i-- {
			if r := rep.Runs[i]; r.Name == name {
				series = append(series, chartSeries{id: seriesIDPrefix + name, label: r.Label, color: color, cumulative: r.Cumulative, admitted: r.Admitted})
				return
			}
		}
	}
	pick(RunLocal, colorLocal)
	pick(RunShared, colorShared)
	pick(RunNaive, colorNaive)
	pick(RunAtomic, colorAtomic)
	b := renderChart(rep, series)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("demo: chart: %w", err)
	}
	return nil
}

// chartTitle says which demo the chart shows (race mode's naive counter
// against the atomic script, or local limiters against a shared one),
// and chartSubtitle with what.
func chartTitle(rep *Report) string {
	if rep.Race {
		return "ratewarden demo --race: naive counter vs atomic script"
	}
	return "ratewarden demo: local vs shared limiter"
}

func chartSubtitle(rep *Report) string {
	return fmt.Sprintf("%s behind a round-robin proxy, one client, limit %s", plural(rep.Replicas, "replica", "replicas"), limitText(rep.Limit))
}

func renderChart(rep *Report, series []chartSeries) []byte {
	limit := int(min(rep.Limit.Capacity(), int64(MaxRequests)))
	top := limit
	for _, s := range series {
		top = max(top, s.admitted)
	}
	yMax := niceCeil(top + top/10 + 1)
	xMax := max(rep.Requests, 1)
	x := func(i int) float64 { return padL + float64(i)*plotW/float64(xMax) }
	y := func(v int) float64 { return padT + plotH - float64(v)*plotH/float64(yMax) }

	var b bytes.Buffer
	b.WriteString(xml.Header)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" %s font-size="%d">`+"\n",
		chartW, chartH, chartW, chartH, chartFont, chartTextSize)
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`+"\n", chartW, chartH)
	text(&b, padL, 22, "start", chartTitleSize, chartTitle(rep))
	text(&b, padL, 40, "start", chartTextSize, chartSubtitle(rep))

	// Grid and ticks.
	for k := 0; k <= chartTicks; k++ {
		vy := yMax * k / chartTicks
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x(0), y(vy), x(xMax), y(vy), colorGrid)
		text(&b, x(0)-8, y(vy)+4, "end", chartTextSize, strconv.Itoa(vy))
		vx := xMax * k / chartTicks
		text(&b, x(vx), y(0)+18, "middle", chartTextSize, strconv.Itoa(vx))
	}
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000000"/>`+"\n", x(0), y(0), x(xMax), y(0))
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000000"/>`+"\n", x(0), y(0), x(0), y(yMax))
	text(&b, x(xMax/2), chartH-14, "middle", chartTextSize, "requests sent (in order of their answers)")
	fmt.Fprintf(&b, `<text x="18" y="%.1f" text-anchor="middle" transform="rotate(-90 18 %.1f)">admitted so far</text>`+"\n", y(yMax/2), y(yMax/2))

	// The limit.
	fmt.Fprintf(&b, `<line id="%s" data-limit="%d" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n",
		limitLineID, limit, x(0), y(limit), x(xMax), y(limit), colorLimit)

	// The series.
	for _, s := range series {
		fmt.Fprintf(&b, `<polyline id="%s" data-admitted="%d" fill="none" stroke="%s" stroke-width="2.5" stroke-linejoin="round" points="%s"/>`+"\n",
			s.id, s.admitted, s.color, points(s.cumulative, x, y))
	}

	// Legend.
	lx, ly := float64(chartW-padR+20), float64(padT+10)
	for i, s := range series {
		yy := ly + float64(i)*40
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2.5"/>`+"\n", lx, yy, lx+24, yy, s.color)
		text(&b, lx+30, yy+4, "start", chartTextSize, s.label)
		text(&b, lx+30, yy+20, "start", chartTextSize, fmt.Sprintf("%d admitted", s.admitted))
	}
	yy := ly + float64(len(series))*40
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n", lx, yy, lx+24, yy, colorLimit)
	text(&b, lx+30, yy+4, "start", chartTextSize, fmt.Sprintf("the limit: %d", limit))
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// points is a polyline's points attribute: the origin, then one point per
// answer (every k-th when there are many), always ending at the last.
func points(cum []int, x func(int) float64, y func(int) float64) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%.1f,%.1f", x(0), y(0))
	step := max(1, (len(cum)+maxChartPoints-1)/maxChartPoints)
	for i := step - 1; i < len(cum); i += step {
		fmt.Fprintf(&sb, " %.1f,%.1f", x(i+1), y(cum[i]))
	}
	if n := len(cum); n > 0 && (n-1)%step != step-1 {
		fmt.Fprintf(&sb, " %.1f,%.1f", x(n), y(cum[n-1]))
	}
	return sb.String()
}

// text writes a <text> element with escaped content.
func text(b *bytes.Buffer, x, y float64, anchor string, size int, s string) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="%s" font-size="%d">`, x, y, anchor, size)
	_ = xml.EscapeText(b, []byte(s)) // a bytes.Buffer does not fail
	b.WriteString("</text>\n")
}

// niceCeil rounds n up to 1, 2, 4, 5 or 8 times a power of ten times
// chartTicks, so that every tick is a round number.
func niceCeil(n int) int {
	if n <= chartTicks {
		return chartTicks
	}
	for p := 1; ; p *= 10 {
		for _, m := range []int{1, 2, 4, 5, 8} {
			if v := m * p * chartTicks; v >= n {
				return v
			}
		}
	}
}
