package chart

import (
	"encoding/xml"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// svgDoc is the part of the chart the tests read back.
type svgDoc struct {
	XMLName xml.Name `xml:"svg"`
	NS      string   `xml:"xmlns,attr"`
	Lines   []struct {
		ID    string  `xml:"id,attr"`
		Limit int     `xml:"data-limit,attr"`
		Y1    float64 `xml:"y1,attr"`
	} `xml:"line"`
	Polylines []struct {
		ID       string `xml:"id,attr"`
		Admitted int    `xml:"data-admitted,attr"`
		Points   string `xml:"points,attr"`
	} `xml:"polyline"`
	Texts []string `xml:"text"`
}

type pt struct{ x, y float64 }

func parsePoints(t *testing.T, s string) []pt {
	t.Helper()
	var ps []pt
	for _, f := range strings.Fields(s) {
		xs, ys, ok := strings.Cut(f, ",")
		x, err1 := strconv.ParseFloat(xs, 64)
		y, err2 := strconv.ParseFloat(ys, 64)
		if !ok || err1 != nil || err2 != nil {
			t.Fatalf("bad point %q", f)
		}
		ps = append(ps, pt{x, y})
	}
	return ps
}

func parse(t *testing.T, b []byte) svgDoc {
	t.Helper()
	var doc svgDoc
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("invalid SVG: %v", err)
	}
	if doc.NS != "http://www.w3.org/2000/svg" {
		t.Errorf("chart namespace %q", doc.NS)
	}
	return doc
}

func limitY(t *testing.T, doc svgDoc) float64 {
	t.Helper()
	for _, l := range doc.Lines {
		if l.ID == LimitLineID {
			return l.Y1
		}
	}
	t.Fatal("chart has no limit line")
	return 0
}

// TestManyRequestsAndEscaping: a long run is thinned to MaxPoints and
// still ends on its last answer; labels are escaped and read back intact.
func TestManyRequestsAndEscaping(t *testing.T) {
	cum := make([]int, 2501)
	for i := range cum {
		cum[i] = min(i+1, 700)
	}
	doc := parse(t, Render(Chart{Limit: 700, Requests: len(cum), Series: []Series{{ID: "series-x", Label: `a <b> & "c"`, Color: "#d62728", Cumulative: cum, Admitted: 700}}}))
	if !contains(doc.Texts, `a <b> & "c"`) {
		t.Errorf("label not round-tripped: %q", doc.Texts)
	}
	ps := parsePoints(t, doc.Polylines[0].Points)
	if len(ps) > MaxPoints+2 {
		t.Errorf("%d points, want at most %d", len(ps), MaxPoints+2)
	}
	want := pt{padL + plotW, limitY(t, doc)}
	if last := ps[len(ps)-1]; last != want {
		t.Errorf("last point %v, want %v (the last request, on the limit)", last, want)
	}
}

// TestSeries: every series is a polyline in the given order, with its id
// and total, one point per answer after the origin, rising (y downwards)
// and ending on the limit line exactly when it admitted the limit.
func TestSeries(t *testing.T) {
	over := []int{1, 2, 3, 4, 5, 6}
	exact := []int{1, 2, 3, 3, 3, 3}
	doc := parse(t, Render(Chart{Title: "t", Subtitle: "s", Limit: 3, Requests: 6, Series: []Series{
		{ID: "over", Label: "over", Cumulative: over, Admitted: 6},
		{ID: "exact", Label: "exact", Cumulative: exact, Admitted: 3},
	}}))
	if len(doc.Texts) < 2 || doc.Texts[0] != "t" || doc.Texts[1] != "s" {
		t.Errorf("title and subtitle: %q", doc.Texts)
	}
	ly := limitY(t, doc)
	for i, want := range []struct {
		id       string
		admitted int
		onLimit  bool
	}{{"over", 6, false}, {"exact", 3, true}} {
		pl := doc.Polylines[i]
		if pl.ID != want.id || pl.Admitted != want.admitted {
			t.Errorf("series %d: %q admitted %d, want %q %d", i, pl.ID, pl.Admitted, want.id, want.admitted)
		}
		ps := parsePoints(t, pl.Points)
		if len(ps) != 7 {
			t.Errorf("series %s: %d points, want 7", pl.ID, len(ps))
		}
		for j := 1; j < len(ps); j++ {
			if ps[j].x <= ps[j-1].x || ps[j].y > ps[j-1].y {
				t.Fatalf("series %s: point %d %v after %v", pl.ID, j, ps[j], ps[j-1])
			}
		}
		if last := ps[len(ps)-1].y; (last == ly) != want.onLimit {
			t.Errorf("series %s ends at y=%v, limit line at %v", pl.ID, last, ly)
		}
	}
}

func TestNiceCeil(t *testing.T) {
	for n := 0; n < 100_000; n += 7 {
		v := niceCeil(n)
		if v < n || v%ticks != 0 || (v > ticks && float64(v) > 2.5*float64(n)) {
			t.Fatalf("niceCeil(%d) = %d", n, v)
		}
	}
}

func TestWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.svg")
	if err := Write(path, Chart{Limit: 1, Requests: 1}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || !strings.Contains(string(b), "<svg") {
		t.Fatalf("written chart: %v", err)
	}
	err := Write(filepath.Join(t.TempDir(), "no", "such", "c.svg"), Chart{})
	if !errors.Is(err, os.ErrNotExist) || !strings.HasPrefix(err.Error(), "chart: ") {
		t.Errorf("unwritable path: %v", err)
	}
}

func contains(texts []string, s string) bool {
	for _, t := range texts {
		if t == s {
			return true
		}
	}
	return false
}
