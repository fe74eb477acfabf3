package demo

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/service/demo/chart"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Small numbers: 3 replicas, 20 per minute, 100 requests. The round-robin
// proxy gives each replica 33 or 34 requests, more than 20, so a local
// limiter admits 20 on each.
const (
	tReplicas = 3
	tRate     = 20
	tRequests = 100
)

var tLimit = ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: tRate, Period: time.Minute}

// noRedis makes the demo believe redis-server is not installed.
func noRedis(string) (string, error) { return "", exec.ErrNotFound }

// syncBuffer is a bytes.Buffer that goroutines may write while a test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func baseConfig(t *testing.T) Config {
	return Config{
		Replicas:    tReplicas,
		Limit:       tLimit,
		Requests:    tRequests,
		Concurrency: 8,
		Chart:       filepath.Join(t.TempDir(), "demo.svg"),
	}
}

// assertCleanedUp checks that every address the demo listened on refuses
// connections and that its redis-server has exited.
func assertCleanedUp(t *testing.T, rep *Report) {
	t.Helper()
	if rep == nil {
		t.Fatal("no report")
	}
	for _, a := range rep.Addrs {
		c, err := net.DialTimeout("tcp", a, time.Second)
		if err == nil {
			c.Close()
			t.Errorf("%s still accepts connections after the demo", a)
		}
	}
	if rep.RedisPID != 0 {
		// The demo reaped it; signal 0 to a reaped pid fails with ESRCH.
		if err := syscall.Kill(rep.RedisPID, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("redis-server pid %d still exists (kill 0: %v)", rep.RedisPID, err)
		}
	}
}

func findRun(t *testing.T, rep *Report, name string) RunResult {
	t.Helper()
	for i := len(rep.Runs) - 1; i >= 0; i-- {
		if rep.Runs[i].Name == name {
			return rep.Runs[i]
		}
	}
	t.Fatalf("no %s run in the report", name)
	return RunResult{}
}

// checkRun asserts the counts of a run are complete and consistent.
func checkRun(t *testing.T, r RunResult, wantAdmitted int) {
	t.Helper()
	if r.Admitted != wantAdmitted {
		t.Errorf("%s: admitted %d, want %d", r.Label, r.Admitted, wantAdmitted)
	}
	if r.Errors != 0 || r.Admitted+r.Rejected != tRequests {
		t.Errorf("%s: admitted %d + rejected %d (errors %d), want %d answers", r.Label, r.Admitted, r.Rejected, r.Errors, tRequests)
	}
	if len(r.Cumulative) != tRequests || r.Cumulative[len(r.Cumulative)-1] != r.Admitted {
		t.Errorf("%s: timeline of %d points ending at %v, want %d ending at %d", r.Label, len(r.Cumulative), r.Cumulative[len(r.Cumulative)-1:], tRequests, r.Admitted)
	}
	sum := 0
	for _, c := range r.Replicas {
		sum += c.Admitted + c.Rejected
	}
	if sum != tRequests {
		t.Errorf("%s: replicas answered %d requests, want %d", r.Label, sum, tRequests)
	}
}

// checkLocalShared asserts the core claim: local limiters admit the limit
// once per replica, a shared one exactly once.
func checkLocalShared(t *testing.T, rep *Report, out string) {
	t.Helper()
	local := findRun(t, rep, RunLocal)
	checkRun(t, local, tReplicas*tRate)
	for i, c := range local.Replicas {
		if c.Admitted != tRate {
			t.Errorf("local: replica %d admitted %d, want %d", i+1, c.Admitted, tRate)
		}
	}
	shared := findRun(t, rep, RunShared)
	checkRun(t, shared, tRate)
	if local.Expected != tReplicas*tRate || shared.Expected != tRate {
		t.Errorf("expected: local %d, shared %d", local.Expected, shared.Expected)
	}
	for _, want := range []string{"3× the limit", "exactly the limit", "replica 3", rep.Shared, "chart: " + rep.Chart} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// svgDoc is the part of the chart the tests read back.
type svgDoc struct {
	XMLName xml.Name `xml:"svg"`
	NS      string   `xml:"xmlns,attr"`
	Lines   []struct {
		ID    string  `xml:"id,attr"`
		Limit int     `xml:"data-limit,attr"`
		Y1    float64 `xml:"y1,attr"`
		Y2    float64 `xml:"y2,attr"`
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

// checkChart parses the SVG and checks it has the runs' series (each
// rising, never falling, and ending at what the run admitted) and the
// limit line, which the exact run's series ends on.
func checkChart(t *testing.T, rep *Report, exact string, series ...string) {
	t.Helper()
	b, err := os.ReadFile(rep.Chart)
	if err != nil {
		t.Fatalf("chart: %v", err)
	}
	var doc svgDoc
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("chart is not valid XML: %v", err)
	}
	if doc.NS != "http://www.w3.org/2000/svg" {
		t.Errorf("chart namespace %q", doc.NS)
	}
	limitY := -1.0
	for _, l := range doc.Lines {
		if l.ID == chart.LimitLineID {
			if l.Limit != tRate || l.Y1 != l.Y2 {
				t.Errorf("limit line: data-limit %d, y %v..%v", l.Limit, l.Y1, l.Y2)
			}
			limitY = l.Y1
		}
	}
	if limitY < 0 {
		t.Fatal("chart has no limit line")
	}
	if len(doc.Polylines) != len(series) {
		t.Fatalf("chart has %d series, want %d", len(doc.Polylines), len(series))
	}
	for i, name := range series {
		pl := doc.Polylines[i]
		run := findRun(t, rep, name)
		if pl.ID != seriesIDPrefix+name || pl.Admitted != run.Admitted {
			t.Errorf("series %d: id %q admitted %d, want %q %d", i, pl.ID, pl.Admitted, seriesIDPrefix+name, run.Admitted)
		}
		ps := parsePoints(t, pl.Points)
		if len(ps) != tRequests+1 {
			t.Errorf("series %s: %d points, want %d", name, len(ps), tRequests+1)
		}
		for j := 1; j < len(ps); j++ {
			if ps[j].x <= ps[j-1].x || ps[j].y > ps[j-1].y {
				t.Fatalf("series %s: point %d %v after %v: x must grow, y (downwards) must not", name, j, ps[j], ps[j-1])
			}
		}
		last := ps[len(ps)-1].y
		switch {
		case name == exact && last != limitY:
			t.Errorf("series %s ends at y=%v, the limit line is at y=%v", name, last, limitY)
		case name != exact && last >= limitY:
			t.Errorf("series %s ends at y=%v, not above the limit line at y=%v", name, last, limitY)
		}
		if !containsText(doc.Texts, run.Label) {
			t.Errorf("legend lacks %q", run.Label)
		}
	}
}

func containsText(texts []string, s string) bool {
	for _, t := range texts {
		if t == s {
			return true
		}
	}
	return false
}

func TestDemoWithRedisServer(t *testing.T) {
	defer goleak.VerifyNone(t)
	out := &syncBuffer{}
	cfg := baseConfig(t)
	cfg.Out = out
	rep, err := Run(context.Background(), cfg)
	assertCleanedUp(t, rep)
	if err != nil {
		t.Fatal(err)
	}
	if rep.SharedKind != KindRedisServer || rep.RedisPID == 0 {
		t.Fatalf("shared state %q (pid %d), want a redis-server the demo started", rep.SharedKind, rep.RedisPID)
	}
	// 3 replicas + proxy per run, and redis-server.
	if len(rep.Addrs) != 2*(tReplicas+1)+1 {
		t.Errorf("addresses %v", rep.Addrs)
	}
	checkLocalShared(t, rep, out.String())
	checkChart(t, rep, RunShared, RunLocal, RunShared)
	t.Logf("\n%s", out.String())
}

func TestDemoFallsBackToRatewardenServer(t *testing.T) {
	defer goleak.VerifyNone(t)
	out := &syncBuffer{}
	cfg := baseConfig(t)
	cfg.Out = out
	cfg.LookPath = noRedis
	rep, err := Run(context.Background(), cfg)
	assertCleanedUp(t, rep)
	if err != nil {
		t.Fatal(err)
	}
	if rep.SharedKind != KindServer || rep.RedisPID != 0 {
		t.Fatalf("shared state %q (pid %d), want the in-process ratewarden server", rep.SharedKind, rep.RedisPID)
	}
	if !strings.Contains(out.String(), "in-process ratewarden server") || !strings.Contains(out.String(), "shared (ratewarden server)") {
		t.Errorf("output does not say which shared state it used:\n%s", out.String())
	}
	checkLocalShared(t, rep, out.String())
	checkChart(t, rep, RunShared, RunLocal, RunShared)
}

func TestDemoWithRedisURL(t *testing.T) {
	srv := testredis.Start(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // srv's goroutines end at cleanup
	out := &syncBuffer{}
	cfg := baseConfig(t)
	cfg.Out = out
	cfg.RedisURL = "redis://" + srv.Addr
	cfg.LookPath = func(string) (string, error) {
		t.Error("the demo looked for redis-server although it was given a URL")
		return "", exec.ErrNotFound
	}
	rep, err := Run(context.Background(), cfg)
	assertCleanedUp(t, rep)
	if err != nil {
		t.Fatal(err)
	}
	if rep.SharedKind != KindRedis || !strings.Contains(rep.Shared, srv.Addr) {
		t.Fatalf("shared state %q %q", rep.SharedKind, rep.Shared)
	}
	checkLocalShared(t, rep, out.String())
	// The user's Redis is not the demo's to stop, and every key the demo
	// wrote expires.
	if err := testredis.Ping(srv.Addr); err != nil {
		t.Fatalf("the demo stopped the Redis it was given: %v", err)
	}
	keys, err := srv.Do("KEYS", "*")
	if err != nil {
		t.Fatal(err)
	}
	if keys == "" {
		t.Fatal("no keys in Redis: did the shared run use it?")
	}
	for _, k := range strings.Split(keys, "\n") {
		if !strings.HasPrefix(k, keyPrefix) {
			t.Errorf("key %q lacks the demo prefix %q", k, keyPrefix)
		}
		if ttl, err := srv.Do("PTTL", k); err != nil || ttl == "-1" {
			t.Errorf("key %q: PTTL %s %v, want an expiry", k, ttl, err)
		}
	}
}

// TestDemoRace: the naive GET-then-SET counter admits more than the limit
// in at most RaceAttempts runs; the atomic script admits exactly the limit.
func TestDemoRace(t *testing.T) {
	defer goleak.VerifyNone(t)
	out := &syncBuffer{}
	cfg := baseConfig(t)
	cfg.Out = out
	cfg.Race = true
	cfg.Concurrency = 16
	// Runs stop at the first that shows the race; a busy machine may need
	// more of them.
	cfg.RaceAttempts = 20
	rep, err := Run(context.Background(), cfg)
	assertCleanedUp(t, rep)
	if err != nil {
		t.Fatal(err)
	}
	naive := findRun(t, rep, RunNaive)
	if !rep.RaceShown || naive.Admitted <= tRate {
		t.Fatalf("the naive counter admitted at most the limit in %d attempts (last: %d of %d):\n%s", naive.Attempt, naive.Admitted, tRate, out.String())
	}
	if naive.Attempt < 1 || naive.Attempt > cfg.RaceAttempts || len(rep.Runs) != naive.Attempt+1 {
		t.Errorf("attempt %d, %d runs", naive.Attempt, len(rep.Runs))
	}
	checkRun(t, naive, naive.Admitted)
	// Lost updates: the counter in Redis holds at most the limit, yet more
	// passed.
	if naive.Counter > tRate || naive.Counter >= naive.Admitted {
		t.Errorf("naive counter in Redis reads %d after %d admitted", naive.Counter, naive.Admitted)
	}
	checkRun(t, findRun(t, rep, RunAtomic), tRate)
	for _, want := range []string{"naive GET+SET, attempt", "atomic script", "exactly the limit", fmt.Sprintf("let %d requests through a limit of %d", naive.Admitted, tRate)} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	checkChart(t, rep, RunAtomic, RunNaive, RunAtomic)
	t.Logf("\n%s", out.String())
}

// TestDemoRaceHonestWhenNotShown: one request in flight cannot race; the
// demo must say so rather than claim it.
func TestDemoRaceHonestWhenNotShown(t *testing.T) {
	defer goleak.VerifyNone(t)
	out := &syncBuffer{}
	cfg := baseConfig(t)
	cfg.Out = out
	cfg.Race = true
	cfg.Concurrency = 1
	cfg.RaceAttempts = 2
	cfg.Chart = ""
	rep, err := Run(context.Background(), cfg)
	assertCleanedUp(t, rep)
	if err != nil {
		t.Fatal(err)
	}
	if rep.RaceShown || len(rep.Runs) != 3 {
		t.Fatalf("race shown %v with %d runs, want not shown in 2 attempts + atomic", rep.RaceShown, len(rep.Runs))
	}
	for _, r := range rep.Runs {
		checkRun(t, r, tRate)
	}
	if !strings.Contains(out.String(), "The race did not show this time: in 2 attempts") {
		t.Errorf("output does not say the race did not show:\n%s", out.String())
	}
	if rep.Chart != "" || strings.Contains(out.String(), "chart:") {
		t.Errorf("chart %q written although disabled", rep.Chart)
	}
}

func TestDemoRaceNeedsRedis(t *testing.T) {
	defer goleak.VerifyNone(t)
	cfg := baseConfig(t)
	cfg.Race = true
	cfg.LookPath = noRedis
	rep, err := Run(context.Background(), cfg)
	if !errors.Is(err, ErrNeedsRedis) {
		t.Fatalf("err = %v, want ErrNeedsRedis", err)
	}
	if len(rep.Addrs) != 0 {
		t.Errorf("started %v before failing", rep.Addrs)
	}
}

// TestDemoCancel cancels the context in the middle of each run, as Ctrl-C
// does: Run returns the cancellation and leaves nothing behind.
func TestDemoCancel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		race   bool
		lookup func(string) (string, error)
		run    string
	}{
		{"redis-server/local", false, nil, RunLocal},
		{"redis-server/shared", false, nil, RunShared},
		{"ratewarden-server/shared", false, noRedis, RunShared},
		{"race/naive", true, nil, RunNaive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cfg := baseConfig(t)
			cfg.Race = tc.race
			cfg.LookPath = tc.lookup
			cfg.Progress = &syncBuffer{}
			var cancelled sync.Once
			cfg.afterRequest = func(run string, done int) {
				if run == tc.run && done >= tRequests/3 {
					cancelled.Do(cancel)
				}
			}
			rep, err := Run(ctx, cfg)
			assertCleanedUp(t, rep)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			if _, err := os.Stat(cfg.Chart); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("chart written by a cancelled demo: %v", err)
			}
			if len(rep.Addrs) == 0 {
				t.Error("no addresses recorded")
			}
		})
	}
}

func TestProgressBar(t *testing.T) {
	defer goleak.VerifyNone(t)
	var b syncBuffer
	cfg := baseConfig(t)
	cfg.LookPath = noRedis
	cfg.Progress = &b
	cfg.Chart = ""
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	for _, want := range []string{
		fmt.Sprintf("\r  local  [%s] %d/%d sent, %d admitted \n", strings.Repeat("█", 30), tRequests, tRequests, tReplicas*tRate),
		fmt.Sprintf("\r  shared [%s] %d/%d sent, %d admitted \n", strings.Repeat("█", 30), tRequests, tRequests, tRate),
	} {
		if !strings.Contains(s, want) {
			t.Errorf("progress lacks the final line %q:\n%q", want, s)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"replicas", func(c *Config) { c.Replicas = -1 }, "replicas"},
		{"too many replicas", func(c *Config) { c.Replicas = MaxReplicas + 1 }, "replicas"},
		{"requests", func(c *Config) { c.Requests = -5 }, "requests"},
		{"concurrency", func(c *Config) { c.Concurrency = MaxConcurrency + 1 }, "concurrency"},
		{"attempts", func(c *Config) { c.RaceAttempts = -1 }, "race attempts"},
		{"limit", func(c *Config) { c.Limit = ratewarden.Limit{Rate: 5} }, "period"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{LookPath: func(string) (string, error) {
				t.Error("looked up redis-server for an invalid config")
				return "", exec.ErrNotFound
			}}
			tc.mod(&cfg)
			_, err := Run(context.Background(), cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			}
			if !errors.Is(err, ratewarden.ErrInvalidConfig) && !errors.Is(err, ratewarden.ErrInvalidLimit) {
				t.Errorf("err = %v, want ErrInvalidConfig or ErrInvalidLimit", err)
			}
		})
	}
	var c Config
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if c.Replicas != DefaultReplicas || c.Requests != DefaultRequests || c.Limit != DefaultLimit || c.Concurrency != DefaultConcurrency {
		t.Errorf("defaults %+v", c)
	}
}

func TestExpected(t *testing.T) {
	for _, tc := range []struct {
		replicas, requests int
		rate               int64
		local, shared      int
	}{
		{3, 100, 20, 60, 20},
		{3, 10, 5, 10, 5},   // shares 4, 3, 3: every request admitted locally
		{3, 16, 5, 15, 5},   // shares 6, 5, 5
		{4, 3, 10, 3, 3},    // fewer requests than the limit
		{1, 50, 10, 10, 10}, // one replica: local is shared
	} {
		cfg := &Config{Replicas: tc.replicas, Requests: tc.requests, Limit: ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: tc.rate, Period: time.Minute}}
		if got := expected(cfg, RunLocal); got != tc.local {
			t.Errorf("%+v: local %d, want %d", tc, got, tc.local)
		}
		if got := expected(cfg, RunShared); got != tc.shared {
			t.Errorf("%+v: shared %d, want %d", tc, got, tc.shared)
		}
	}
}

func TestNote(t *testing.T) {
	minute := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	fixed := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 100, Period: time.Minute}
	if n := note(fixed, minute.Add(10*time.Second), time.Second); n != "" {
		t.Errorf("fixed window inside a window: %q", n)
	}
	if n := note(fixed, minute.Add(59*time.Second+500*time.Millisecond), time.Second); !strings.Contains(n, "window boundary") {
		t.Errorf("fixed window across a boundary: %q", n)
	}
	tb := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 100, Period: time.Minute}
	if n := note(tb, minute, 100*time.Millisecond); n != "" {
		t.Errorf("token bucket, no refill: %q", n)
	}
	if n := note(tb, minute, time.Second); !strings.Contains(n, "refills one token every 600ms") {
		t.Errorf("token bucket with refill: %q", n)
	}
	if n := note(tLimit, minute.Add(59*time.Second), time.Second); n != "" {
		t.Errorf("sliding log across a boundary: %q", n)
	}
	if n := note(tLimit, minute, 2*time.Minute); !strings.Contains(n, "longer than the 1m0s period") {
		t.Errorf("sliding log longer than the period: %q", n)
	}
}

func TestVerdict(t *testing.T) {
	for _, tc := range []struct {
		admitted int
		want     string
	}{{20, "exactly the limit"}, {60, "3× the limit"}, {27, "7 over the limit"}, {15, "5 under the limit"}} {
		if got := verdict(RunResult{Admitted: tc.admitted}, 20); got != tc.want {
			t.Errorf("verdict(%d) = %q, want %q", tc.admitted, got, tc.want)
		}
	}
}

func TestWideTable(t *testing.T) {
	var b bytes.Buffer
	r := RunResult{Name: RunLocal, Label: "local (memory per replica)", Admitted: 40, Rejected: 2}
	for i := range 8 {
		r.Replicas = append(r.Replicas, ReplicaCount{Admitted: 5 + i%2})
	}
	printReport(&b, &Report{Limit: tLimit, Replicas: 8, Runs: []RunResult{r}})
	if !strings.Contains(b.String(), "per replica") || !strings.Contains(b.String(), "5..6") || strings.Contains(b.String(), "replica 8") {
		t.Errorf("8 replicas should share one column:\n%s", b.String())
	}
}

// TestDemoRedisServerFailsToStart: a redis-server that exits at once is an
// error that says so, with nothing left running.
func TestDemoRedisServerFailsToStart(t *testing.T) {
	defer goleak.VerifyNone(t)
	falseBin, err := exec.LookPath("false")
	if err != nil {
		t.Fatalf("no false(1) on PATH: %v", err)
	}
	cfg := baseConfig(t)
	cfg.LookPath = func(string) (string, error) { return falseBin, nil }
	rep, err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "redis-server exited at start") {
		t.Fatalf("err = %v", err)
	}
	assertCleanedUp(t, rep)
	if len(rep.Addrs) != 0 || rep.RedisPID != 0 {
		t.Errorf("report %+v", rep)
	}
}

// TestDemoChartUnwritable: the report is printed, and the error returned,
// when the chart cannot be written.
func TestDemoChartUnwritable(t *testing.T) {
	defer goleak.VerifyNone(t)
	out := &syncBuffer{}
	cfg := baseConfig(t)
	cfg.Out = out
	cfg.LookPath = noRedis
	cfg.Chart = filepath.Join(t.TempDir(), "no", "such", "dir", "c.svg")
	rep, err := Run(context.Background(), cfg)
	assertCleanedUp(t, rep)
	if err == nil || !strings.Contains(err.Error(), "demo: chart") {
		t.Fatalf("err = %v, want a chart error", err)
	}
	if rep.Chart != "" || strings.Contains(out.String(), "chart:") || !strings.Contains(out.String(), "exactly the limit") {
		t.Errorf("chart %q; output:\n%s", rep.Chart, out.String())
	}
}

// TestCountsInWords: counts printed in sentences take the word for their
// number: 1 replica, 2 replicas.
func TestCountsInWords(t *testing.T) {
	var b bytes.Buffer
	one := ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 1, Period: time.Minute}
	printHeader(&b, &Config{Replicas: 1, Limit: one, Requests: 1, Concurrency: 1, Race: true, RaceAttempts: 1}, &Report{Shared: "x"})
	for _, want := range []string{"one client, 1 API replica behind", "at most 1 request per 1m", "traffic:      1 request per run", "(up to 1 attempt)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("header lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	printHeader(&b, &Config{Replicas: 2, Limit: tLimit, Requests: 5, Concurrency: 1, Race: true, RaceAttempts: 3}, &Report{Shared: "x"})
	for _, want := range []string{"2 API replicas behind", "at most 20 requests per", "5 requests per run", "(up to 3 attempts)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("header lacks %q:\n%s", want, b.String())
		}
	}
	race := &Report{Limit: tLimit, Runs: []RunResult{{Name: RunNaive, Attempt: 1, Admitted: tRate}, {Name: RunAtomic, Admitted: tRate}}}
	if c := conclusion(race); !strings.Contains(c, "in 1 attempt the naive counter") {
		t.Errorf("conclusion: %q", c)
	}
	local := &Report{Limit: one, Replicas: 1, Runs: []RunResult{{Name: RunLocal, Admitted: 1}, {Name: RunShared, Admitted: 1}}}
	if c := conclusion(local); !strings.Contains(c, "got 1 request through") || !strings.Contains(c, "its one replica counted") {
		t.Errorf("conclusion: %q", c)
	}
}

// TestChartTitle: race mode's chart says it shows the naive counter, so
// it cannot be mistaken for the local-vs-shared chart.
func TestChartTitle(t *testing.T) {
	for _, tc := range []struct {
		race        bool
		title, want string
	}{
		{false, "ratewarden demo: local vs shared limiter", "1 replica behind a round-robin proxy, one client, limit 20/1m sliding_log"},
		{true, "ratewarden demo --race: naive counter vs atomic script", "1 replica behind a round-robin proxy, one client, limit 20/1m sliding_log"},
	} {
		var doc svgDoc
		if err := xml.Unmarshal(chart.Render(chartOf(&Report{Limit: tLimit, Replicas: 1, Requests: 1, Race: tc.race})), &doc); err != nil {
			t.Fatal(err)
		}
		if len(doc.Texts) < 2 || doc.Texts[0] != tc.title || doc.Texts[1] != tc.want {
			t.Errorf("race %v: title %q, want %q, %q", tc.race, doc.Texts[:min(2, len(doc.Texts))], tc.title, tc.want)
		}
	}
	if DefaultChart(false) == DefaultChart(true) || filepath.Dir(DefaultChart(false)) != os.TempDir() {
		t.Errorf("default charts %q, %q: want distinct files in %s", DefaultChart(false), DefaultChart(true), os.TempDir())
	}
}
