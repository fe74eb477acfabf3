package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
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
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"demo", "-h"}, &out, &errb, noenv); code != 0 || !strings.Contains(errb.String(), "-race") {
		t.Errorf("-h: exit %d: %s", code, errb.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"help"}, &out, &errb, noenv); code != 0 || !strings.Contains(out.String(), "ratewarden demo") {
		t.Errorf("help does not list demo: %s", out.String())
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
		{"7/1h sliding_window", "", ratewarden.Limit{Rate: 7, Period: time.Hour}},
	} {
		got, err := demoLimit(tc.limit, tc.alg)
		if err != nil || got != tc.want {
			t.Errorf("demoLimit(%q, %q) = %v, %v; want %v", tc.limit, tc.alg, got, err, tc.want)
		}
	}
}
