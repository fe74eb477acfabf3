package demo

import (
	"fmt"

	"github.com/ratewarden/ratewarden/service/demo/chart"
)

// Series ids and colors of the chart, per run kind.
const seriesIDPrefix = "series-"

var runColors = map[string]string{
	RunLocal:  "#d62728",
	RunShared: "#2ca02c",
	RunNaive:  "#ff7f0e",
	RunAtomic: "#1f77b4",
}

// writeChart draws the report's runs (in race mode: the last naive attempt
// and the atomic run) into the SVG file at path.
func writeChart(path string, rep *Report) error {
	if err := chart.Write(path, chartOf(rep)); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	return nil
}

// chartOf is the chart of rep: the cumulative admitted requests of the
// last run of each kind against the request count, the limit dashed.
func chartOf(rep *Report) chart.Chart {
	c := chart.Chart{
		Title:    chartTitle(rep),
		Subtitle: fmt.Sprintf("%s behind a round-robin proxy, one client, limit %s", plural(rep.Replicas, "replica", "replicas"), limitText(rep.Limit)),
		Limit:    int(min(rep.Limit.Capacity(), int64(MaxRequests))),
		Requests: rep.Requests,
	}
	for _, name := range []string{RunLocal, RunShared, RunNaive, RunAtomic} {
		for i := len(rep.Runs) - 1; i >= 0; i-- {
			if r := rep.Runs[i]; r.Name == name {
				c.Series = append(c.Series, chart.Series{ID: seriesIDPrefix + name, Label: r.Label, Color: runColors[name], Cumulative: r.Cumulative, Admitted: r.Admitted})
				break
			}
		}
	}
	return c
}

// chartTitle says which demo the chart shows: race mode's naive counter
// against the atomic script, or local limiters against a shared one.
func chartTitle(rep *Report) string {
	if rep.Race {
		return "ratewarden demo --race: naive counter vs atomic script"
	}
	return "ratewarden demo: local vs shared limiter"
}
