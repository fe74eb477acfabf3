// Package chart draws the demo's chart as a plain, self-contained SVG: for
// each run, how many requests had been admitted after each answer, against
// the number of answers, with the limit as a dashed line.
//
// The elements tests read back carry ids and data attributes: the limit
// line is <line id="limit" data-limit="N">, each series a
// <polyline id="..." data-admitted="N">, in the order given.
package chart

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Series is one line of the chart.
type Series struct {
	// ID is the polyline's id attribute.
	ID string
	// Label names the series in the legend.
	Label string
	// Color is an SVG color ("#d62728").
	Color string
	// Cumulative[i] is the number admitted among the first i+1 answers.
	Cumulative []int
	// Admitted is the series' total, shown in the legend.
	Admitted int
}

// Chart is what Render draws.
type Chart struct {
	// Title and Subtitle head the chart.
	Title, Subtitle string
	// Limit is the height of the dashed limit line.
	Limit int
	// Requests is the length of the x axis (answers).
	Requests int
	// Series are drawn in order.
	Series []Series
}

// LimitLineID is the id of the limit line.
const LimitLineID = "limit"

// MaxPoints bounds the points of one polyline: with more answers, every
// k-th is drawn (and always the last).
const MaxPoints = 600

// Geometry, in SVG user units: the plot sits inside the padding, the
// legend to its right.
const (
	width, height          = 840, 460
	padL, padR, padT, padB = 70, 230, 50, 60
	plotW, plotH           = width - padL - padR, height - padT - padB
	ticks                  = 5
	colorLimit, colorGrid  = "#444444", "#e5e5e5"
	font                   = `font-family="sans-serif"`
	titleSize, textSize    = 16, 12
)

// Write renders c into the file at path.
func Write(path string, c Chart) error {
	if err := os.WriteFile(path, Render(c), 0o644); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return nil
}

// Render returns c as an SVG document.
func Render(c Chart) []byte {
	top := c.Limit
	for _, s := range c.Series {
		top = max(top, s.Admitted)
	}
	p := plot{yMax: niceCeil(top + top/10 + 1), xMax: max(c.Requests, 1)}

	var b bytes.Buffer
	b.WriteString(xml.Header)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" %s font-size="%d">`+"\n",
		width, height, width, height, font, textSize)
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	text(&b, padL, 22, "start", titleSize, c.Title)
	text(&b, padL, 40, "start", textSize, c.Subtitle)
	p.axes(&b)
	fmt.Fprintf(&b, `<line id="%s" data-limit="%d" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n",
		LimitLineID, c.Limit, p.x(0), p.y(c.Limit), p.x(p.xMax), p.y(c.Limit), colorLimit)
	for _, s := range c.Series {
		fmt.Fprintf(&b, `<polyline id="%s" data-admitted="%d" fill="none" stroke="%s" stroke-width="2.5" stroke-linejoin="round" points="%s"/>`+"\n",
			s.ID, s.Admitted, s.Color, p.points(s.Cumulative))
	}
	legend(&b, c)
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// plot maps answers (x) and admitted counts (y) to the plot area.
type plot struct{ xMax, yMax int }

func (p plot) x(i int) float64 { return padL + float64(i)*plotW/float64(p.xMax) }
func (p plot) y(v int) float64 { return padT + plotH - float64(v)*plotH/float64(p.yMax) }

// axes draws the grid, the ticks, the axes and their titles.
func (p plot) axes(b *bytes.Buffer) {
	for k := 0; k <= ticks; k++ {
		vy := p.yMax * k / ticks
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", p.x(0), p.y(vy), p.x(p.xMax), p.y(vy), colorGrid)
		text(b, p.x(0)-8, p.y(vy)+4, "end", textSize, strconv.Itoa(vy))
		vx := p.xMax * k / ticks
		text(b, p.x(vx), p.y(0)+18, "middle", textSize, strconv.Itoa(vx))
	}
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000000"/>`+"\n", p.x(0), p.y(0), p.x(p.xMax), p.y(0))
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000000"/>`+"\n", p.x(0), p.y(0), p.x(0), p.y(p.yMax))
	text(b, p.x(p.xMax/2), height-14, "middle", textSize, "requests sent (in order of their answers)")
	fmt.Fprintf(b, `<text x="18" y="%.1f" text-anchor="middle" transform="rotate(-90 18 %.1f)">admitted so far</text>`+"\n", p.y(p.yMax/2), p.y(p.yMax/2))
}

// points is a polyline's points attribute: the origin, then one point per
// answer (every k-th when there are many), always ending at the last.
func (p plot) points(cum []int) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%.1f,%.1f", p.x(0), p.y(0))
	step := max(1, (len(cum)+MaxPoints-1)/MaxPoints)
	for i := step - 1; i < len(cum); i += step {
		fmt.Fprintf(&sb, " %.1f,%.1f", p.x(i+1), p.y(cum[i]))
	}
	if n := len(cum); n > 0 && (n-1)%step != step-1 {
		fmt.Fprintf(&sb, " %.1f,%.1f", p.x(n), p.y(cum[n-1]))
	}
	return sb.String()
}

// legend names each series with its total, then the limit.
func legend(b *bytes.Buffer, c Chart) {
	lx, ly := float64(width-padR+20), float64(padT+10)
	for i, s := range c.Series {
		yy := ly + float64(i)*40
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2.5"/>`+"\n", lx, yy, lx+24, yy, s.Color)
		text(b, lx+30, yy+4, "start", textSize, s.Label)
		text(b, lx+30, yy+20, "start", textSize, fmt.Sprintf("%d admitted", s.Admitted))
	}
	yy := ly + float64(len(c.Series))*40
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n", lx, yy, lx+24, yy, colorLimit)
	text(b, lx+30, yy+4, "start", textSize, fmt.Sprintf("the limit: %d", c.Limit))
}

// text writes a <text> element with escaped content.
func text(b *bytes.Buffer, x, y float64, anchor string, size int, s string) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="%s" font-size="%d">`, x, y, anchor, size)
	_ = xml.EscapeText(b, []byte(s)) // a bytes.Buffer does not fail
	b.WriteString("</text>\n")
}

// niceCeil rounds n up to 1, 2, 4, 5 or 8 times a power of ten times the
// number of ticks (5), so that every tick of the y axis is a round number.
func niceCeil(n int) int {
	if n <= ticks {
		return ticks
	}
	for p := 1; ; p *= 10 {
		for _, m := range []int{1, 2, 4, 5, 8} {
			if v := m * p * ticks; v >= n {
				return v
			}
		}
	}
}
