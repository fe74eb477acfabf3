package chart_test

import (
	"fmt"
	"strings"

	"github.com/ratewarden/ratewarden/service/demo/chart"
)

func ExampleRender() {
	svg := chart.Render(chart.Chart{
		Title:    "one series",
		Limit:    2,
		Requests: 3,
		Series:   []chart.Series{{ID: "run", Label: "run", Color: "#1f77b4", Cumulative: []int{1, 2, 2}, Admitted: 2}},
	})
	fmt.Println(strings.Contains(string(svg), `<polyline id="run" data-admitted="2"`))
	// Output: true
}
