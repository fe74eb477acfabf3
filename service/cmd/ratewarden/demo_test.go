package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/service/demo"
)

// TestDemoCommand runs `ratewarden demo` with small numbers: 3 replicas,
// 20 per minute, 100 requests.
func TestDemoCommand(t *testing.T) {
	chart := filepath.Join(t.TempDir(), "chart.svg")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"demo", "--replicas", "3", "--limit", "20/1m", "--requests", "100", "--concurrency", "8", "--chart", chart}, &out, &errb, noenv)
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, out.String(), errb.String())
	}
	for _, want := range []string{"20/1m sliding_log", "redis-server on 127.0.0.1:", "got 60 requests through, not 20", "3× the limit", "it got exactly 20", "chart: " + chart} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if errb.Len() != 0 {
		t.Errorf("stderr is not a terminal, yet got %q", errb.String())
	}
	b, err := os.ReadFile(chart)
	if err != nil {
		t.Fatal(err)
	}
	var svg struct {
		XMLName   xml.Name `xml:"svg"`
		Polylines []struct {
			ID string `xml:"id,attr"`
		} `xml:"polyline"`
	}
	if err := xml.Unmarshal(b, &svg); err != nil {
		t.Fatalf("chart: %v", err)
	}
	if len(svg.Polylines) != 2 || svg.Polylines[0].ID != "series-local" || svg.Polylines[1].ID != "series-shared" {
		t.Errorf("chart series %+v", svg.Polylines)
	}
}

// TestDemoCommandInterrupted: a cancelled context (Ctrl-C) ends the demo
// with exit 1 and a word on stderr.
func TestDemoCommandInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errb bytes.Buffer
	code := run(ctx, []string{"demo", "--requests", "100", "--limit", "20/1m", "--chart", ""}, &out, &errb, noenv)
	if code != 1 || !strings.Contains(errb.String(), "interrupted") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

func TestDemoCommandUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--limit", "nope"},
		{"--limit", "5/1m fixed_window", "--algorithm", "sliding_log"},
		{"--algorithm", "leaky"},
		{"--limit", "10/1s burst 5"},
		{"--replicas", "0"},
		{"--requests", "-1"},
		{"--concurrency", "0"},
		{"--race-attempts", "0"},
		{"--replicas", "1000"},
		{"extra"},
		{"--nope"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), append([]string{"demo"}, args...), &out, &errb, noenv); code != 2 {
			t.Errorf("%q: exit %d, want 2 (stderr %q)", args, code, errb.String())
		}
		if out.Len() != 0 {
			t.Errorf("%q: wrote %q to stdout", args, out.String())
		}
	}
	if code, out, errs := runArgs("demo", "-h"); code != 0 || !strings.Contains(out, "-race") || errs != "" {
		t.Errorf("-h: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, out, _ := runArgs("help"); code != 0 || !strings.Contains(out, "demo [flags]") {
		t.Errorf("help does not list demo: %s", out)
	}
}

// TestDemoFlagRanges: every numeric flag's range is checked before the
// demo starts anything, and the error names the flag and the range.
func TestDemoFlagRanges(t *testing.T) {
	for _, tc := range []struct {
		flag     string
		min, max int
	}{
		{"replicas", 1, demo.MaxReplicas},
		{"requests", 1, demo.MaxRequests},
		{"concurrency", 1, demo.MaxConcurrency},
		{"race-attempts", 1, demo.MaxRaceAttempts},
	} {
		for _, v := range []int{tc.min - 1, tc.max + 1} {
			code, out, errs := runArgs("demo", "--"+tc.flag, strconv.Itoa(v))
			want := fmt.Sprintf("ratewarden demo: --%s must be between %d and %d, got %d\nRun \"ratewarden demo -h\" for usage.\n", tc.flag, tc.min, tc.max, v)
			if code != 2 || out != "" || errs != want {
				t.Errorf("--%s %d: exit %d, stdout %q, stderr %q; want 2 and %q", tc.flag, v, code, out, errs, want)
			}
		}
	}
	if code, _, errs := runArgs("demo", "--replicas", "65"); code != 2 || !strings.HasPrefix(errs, "ratewarden demo: --replicas must be between 1 and 64, got 65\n") {
		t.Errorf("--replicas 65: exit %d, stderr %q", code, errs)
	}
}

// TestDemoRaceWithoutRedis: --race with no redis-server on PATH and no
// --redis says which flag to give.
func TestDemoRaceWithoutRedis(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	code, _, errs := runArgs("demo", "--race", "--requests", "10", "--chart", "")
	want := "ratewarden demo: --race needs Redis: give --redis URL, or install redis-server (on PATH) for the demo to start\n"
	if code != 1 || errs != want {
		t.Errorf("exit %d, stderr %q; want 1 and %q", code, errs, want)
	}
}

// TestDemoChartDefaults: by default the chart goes to the temporary
// directory (never the current one), under a name and title of its own
// in race mode; --chart "" writes none.
func TestDemoChartDefaults(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	small := []string{"--replicas", "2", "--limit", "10/1m", "--requests", "40", "--concurrency", "4"}
	for _, tc := range []struct {
		race  bool
		name  string
		title string
	}{
		{false, demo.ChartName, "ratewarden demo: local vs shared limiter"},
		{true, demo.RaceChartName, "ratewarden demo --race: naive counter vs atomic script"},
	} {
		args := append([]string{"demo"}, small...)
		if tc.race {
			args = append(args, "--race", "--race-attempts", "1")
		}
		code, out, errs := runArgs(args...)
		path := filepath.Join(tmp, tc.name)
		if code != 0 || !strings.Contains(out, "\nchart: "+path+" ") {
			t.Fatalf("%q: exit %d, stderr %q; stdout lacks \"chart: %s\":\n%s", args, code, errs, path, out)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		var svg struct {
			Texts []string `xml:"text"`
		}
		if err := xml.Unmarshal(b, &svg); err != nil || len(svg.Texts) == 0 || svg.Texts[0] != tc.title {
			t.Errorf("%q: chart title %q (%v), want %q", args, svg.Texts[:min(1, len(svg.Texts))], err, tc.title)
		}
	}
	for _, name := range []string{demo.ChartName, demo.RaceChartName} {
		if _, err := os.Stat(name); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s in the current directory: %v", name, err)
		}
	}
	empty := t.TempDir()
	t.Setenv("TMPDIR", empty)
	code, out, errs := runArgs(append([]string{"demo", "--chart", ""}, small...)...)
	if code != 0 || strings.Contains(out, "chart:") {
		t.Errorf(`--chart "": exit %d, stderr %q, stdout:\n%s`, code, errs, out)
	}
	if ents, err := os.ReadDir(empty); err != nil || len(ents) != 0 {
		t.Errorf(`--chart "" wrote %v (%v)`, ents, err)
	}
}

func TestDemoLimit(t *testing.T) {
	for _, tc := range []struct {
		limit, alg string
		want       ratewarden.Limit
	}{
		{"100/1m", "", ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 100, Period: time.Minute}},
		{"100/1m", "token_bucket", ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 100, Period: time.Minute}},
		{"10/1s burst 5", "token_bucket", ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Second, Burst: 5}},
		{"5/30s fixed_window", "", ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 5, Period: 30 * time.Second}},
		{"5/30s fixed_window", "fixed_window", ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 5, Period: 30 * time.Second}},
		{"7/1h sliding_window", "", ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 7, Period: time.Hour}},
	} {
		got, err := demoLimit(tc.limit, tc.alg)
		if err != nil || got != tc.want {
			t.Errorf("demoLimit(%q, %q) = %v, %v; want %v", tc.limit, tc.alg, got, err, tc.want)
		}
	}
}
