package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden"
)

// Workload is one traffic shape.
type Workload struct {
	Name string
	// Instances is the number of independent limiters (each with its own
	// client) sharing the callers.
	Instances int
	// Keys is the number of distinct keys; 1 is a hot key.
	Keys  int
	Limit Limit
	// Ideal is the number of admissions an exact limiter makes, or 0 when
	// every request should pass.
	Ideal int64
	// Share scales the cell duration.
	Share float64
}

// Workloads returns the three workloads of the comparison.
func Workloads() []Workload {
	return []Workload{
		{Name: "many keys", Instances: 1, Keys: 100_000, Limit: Limit{Rate: 1_000_000, Period: time.Hour}, Share: 1},
		{Name: "hot key flood", Instances: 1, Keys: 1, Limit: Limit{Rate: 100, Period: time.Hour}, Ideal: 100, Share: 0.5},
		{Name: "4 instances, one key", Instances: 4, Keys: 1, Limit: Limit{Rate: 1000, Period: time.Hour}, Ideal: 1000, Share: 0.5},
	}
}

// Cell is the outcome of one contender on one workload at one concurrency,
// in one repetition.
type Cell struct {
	Decisions int64
	Admitted  int64
	Errors    int64
	FirstErr  error
	Elapsed   time.Duration
	RedisCPU  float64 // seconds
	Calls     int64   // commands Redis ran, including those inside scripts
	lat       hist
}

// PerSec is decisions per second.
func (c *Cell) PerSec() float64 { return float64(c.Decisions) / c.Elapsed.Seconds() }

var cellSeq atomic.Int64

// Bound says when a cell stops: after Requests requests in total (shared by
// its callers) when Requests > 0, otherwise once Duration has passed.
type Bound struct {
	Duration time.Duration
	Requests int64
}

// RunCell runs one cell: FLUSHALL, open the instances, warm them up (loads
// the scripts), then callers goroutines call Allow until b is reached. A
// cell bounded by a request count whose ctx ends before every request was
// decided fails, saying how many were.
func RunCell(ctx context.Context, r *Redis, con Contender, w Workload, callers int, b Bound, keys []string) (*Cell, error) {
	if callers < 1 {
		return nil, fmt.Errorf("bench: callers must be at least 1, got %d: %w", callers, ratewarden.ErrInvalidConfig)
	}
	if b.Requests <= 0 && b.Duration <= 0 {
		return nil, fmt.Errorf("bench: a cell needs a positive duration or request count: %w", ratewarden.ErrInvalidConfig)
	}
	if err := r.FlushAll(ctx); err != nil {
		return nil, err
	}
	insts, err := openInstances(ctx, r, con, w, callers)
	defer func() {
		for _, in := range insts {
			in.Close()
		}
	}()
	if err != nil {
		return nil, err
	}
	hot := "hot:" + strconv.FormatInt(cellSeq.Add(1), 10) // fresh per cell
	before, err := r.Stats(ctx)
	if err != nil {
		return nil, err
	}
	parts := make([]tally, callers)
	var wg sync.WaitGroup
	var issued atomic.Int64 // requests taken by callers, in count mode
	start := make(chan struct{})
	for g := range callers {
		l := caller{in: insts[g%len(insts)], w: w, b: b, keys: keys, hot: hot, first: (g * 7919) % max(len(keys), 1), issued: &issued}
		p := &parts[g]
		wg.Go(func() {
			<-start
			l.run(ctx, p)
		})
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	c := &Cell{Elapsed: time.Since(t0)}
	for i := range parts {
		c.add(&parts[i])
	}
	if b.Requests > 0 && (c.Decisions < b.Requests || ctx.Err() != nil) {
		return nil, fmt.Errorf("bench: %s, %s, %d callers: %d of %d requests decided (%d admitted, %d errors) in %v, when the context ended: %w",
			w.Name, con.Name, callers, c.Decisions, b.Requests, c.Admitted, c.Errors, c.Elapsed.Round(time.Millisecond), context.Cause(ctx))
	}
	after, err := r.Stats(ctx)
	if err != nil {
		return nil, err
	}
	c.RedisCPU = after.CPU - before.CPU
	c.Calls = after.Calls - before.Calls - 1 // the INFO itself
	return c, nil
}

// openInstances opens a cell's instances (at most one per caller) and
// warms each up; it returns those it opened even with an error, for the
// caller to close.
func openInstances(ctx context.Context, r *Redis, con Contender, w Workload, callers int) ([]Instance, error) {
	n := min(w.Instances, callers)
	insts := make([]Instance, 0, n)
	for i := range n {
		in, err := con.Open(r.Addr, (callers+n-1)/n, w.Limit)
		if err != nil {
			return insts, fmt.Errorf("bench: %s: open: %w", con.Name, err)
		}
		insts = append(insts, in)
		if _, err := in.Allow(ctx, "warm-up:"+strconv.Itoa(i)); err != nil {
			return insts, fmt.Errorf("bench: %s: warm-up: %w", con.Name, err)
		}
	}
	return insts, nil
}

// tally is what one caller of a cell counted.
type tally struct {
	dec, adm, errs int64
	first          error
	lat            hist
}

func (c *Cell) add(p *tally) {
	c.Decisions += p.dec
	c.Admitted += p.adm
	c.Errors += p.errs
	if c.FirstErr == nil {
		c.FirstErr = p.first
	}
	c.lat.merge(&p.lat)
}

// caller is one caller of a cell: it calls Allow on its instance, on the hot
// key or round the keys from first, until the cell's bound is reached.
type caller struct {
	in     Instance
	w      Workload
	b      Bound
	keys   []string
	hot    string
	first  int
	issued *atomic.Int64
}

func (l *caller) run(ctx context.Context, p *tally) {
	stop := time.Now().Add(l.b.Duration)
	k := l.first
	for {
		if ctx.Err() != nil || (l.b.Requests > 0 && l.issued.Add(1) > l.b.Requests) {
			return
		}
		key := l.hot
		if l.w.Keys > 1 {
			key = l.keys[k]
			if k++; k == len(l.keys) {
				k = 0
			}
		}
		t0 := time.Now()
		ok, err := l.in.Allow(ctx, key)
		t1 := time.Now()
		p.lat.add(t1.Sub(t0))
		p.dec++
		switch {
		case err != nil:
			p.errs++
			if p.first == nil {
				p.first = err
			}
		case ok:
			p.adm++
		}
		if l.b.Requests <= 0 && !t1.Before(stop) {
			return
		}
	}
}

// Config bounds a comparison run.
type Config struct {
	Callers  []int
	Reps     int
	Duration time.Duration // of a "many keys" cell; others scale by Share
	// Requests, when > 0, bounds every cell by a request count instead of
	// Duration: each cell sends exactly this many requests (shared by its
	// callers), however long they take; ctx is then the only time cap.
	Requests    int64
	Contenders  []Contender
	Workloads   []Workload
	Progress    io.Writer // nil: silent
	FailOnError bool
}

// Summary is every cell of a run, by workload, contender and callers.
type Summary struct {
	cfg   Config
	cells map[string][]*Cell
}

func cellKey(w, c string, callers int) string { return w + "\x00" + c + "\x00" + strconv.Itoa(callers) }

// Run runs every cell Reps times, interleaving contenders (their order
// rotates from one repetition to the next) so that a noisy moment does not
// hit one contender's cells only.
func Run(ctx context.Context, r *Redis, cfg Config) (*Summary, error) {
	s := &Summary{cfg: cfg, cells: map[string][]*Cell{}}
	keys := make([]string, 0, 100_000)
	for _, w := range cfg.Workloads {
		if w.Keys > cap(keys) {
			keys = make([]string, 0, w.Keys)
		}
	}
	for i := range cap(keys) {
		keys = append(keys, "user:"+strconv.Itoa(i))
	}
	for rep := range cfg.Reps {
		for _, w := range cfg.Workloads {
			for _, callers := range cfg.Callers {
				if callers < w.Instances && w.Instances > 1 {
					continue
				}
				for i := range cfg.Contenders {
					con := cfg.Contenders[(i+rep)%len(cfg.Contenders)]
					b := Bound{Duration: time.Duration(float64(cfg.Duration) * w.Share), Requests: cfg.Requests}
					c, err := RunCell(ctx, r, con, w, callers, b, keys[:min(w.Keys, len(keys))])
					if err != nil {
						return nil, err
					}
					if c.Errors > 0 && cfg.FailOnError {
						return nil, fmt.Errorf("bench: %s, %s, %d callers: %d errors, first: %w", w.Name, con.Name, callers, c.Errors, c.FirstErr)
					}
					if cfg.Progress != nil {
						fmt.Fprintf(cfg.Progress, "rep %d  %-22s %-40s C=%-4d %9.0f/s\n", rep+1, w.Name, con.Name, callers, c.PerSec())
					}
					k := cellKey(w.Name, con.Name, callers)
					s.cells[k] = append(s.cells[k], c)
				}
			}
		}
	}
	return s, nil
}

// Agg is the median of a cell over its repetitions; latencies come from
// all repetitions' samples together.
type Agg struct {
	PerSec           float64
	P50, P99, P999   time.Duration
	Admitted, Ideal  int64 // medians
	CPUPerDecision   time.Duration
	CallsPerDecision float64
	Errors           int64
	Reps             int
}

// Get aggregates one cell; ok is false if it did not run.
func (s *Summary) Get(workload, contender string, callers int) (Agg, bool) {
	cs := s.cells[cellKey(workload, contender, callers)]
	if len(cs) == 0 {
		return Agg{}, false
	}
	var a Agg
	var h hist
	var rate, adm, cpu, calls []float64
	for _, c := range cs {
		h.merge(&c.lat)
		rate = append(rate, c.PerSec())
		adm = append(adm, float64(c.Admitted))
		cpu = append(cpu, c.RedisCPU/float64(max(c.Decisions, 1)))
		calls = append(calls, float64(c.Calls)/float64(max(c.Decisions, 1)))
		a.Errors += c.Errors
	}
	a.Reps = len(cs)
	a.PerSec = median(rate)
	a.Admitted = int64(median(adm))
	a.CPUPerDecision = time.Duration(median(cpu) * 1e9)
	a.CallsPerDecision = median(calls)
	a.P50, a.P99, a.P999 = h.quantile(0.5), h.quantile(0.99), h.quantile(0.999)
	return a, true
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Millisecond:
		return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) + " ms"
	default:
		return strconv.FormatFloat(float64(d)/1e3, 'f', 0, 64) + " µs"
	}
}

func ratio(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64) + "×"
}

// Markdown writes one table per workload, with ratios against the peers
// measured in the same run, and the acceptance figures.
func (s *Summary) Markdown(w io.Writer) {
	for _, wl := range s.cfg.Workloads {
		fmt.Fprintf(w, "\n### %s (%d key(s), limit %d per %v, %d instance(s))\n\n", wl.Name, wl.Keys, wl.Limit.Rate, wl.Limit.Period, wl.Instances)
		fmt.Fprintln(w, "| contender | C | decisions/s | vs redis_rate | vs ulule | vs bare | p50 | p99 | p99.9 | admitted / ideal | Redis CPU per decision | Redis commands per decision (incl. inside scripts) | errors |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, callers := range s.cfg.Callers {
			rr, _ := s.Get(wl.Name, RedisRate, callers)
			ul, _ := s.Get(wl.Name, Ulule, callers)
			bare, _ := s.Get(wl.Name, Bare, callers)
			for _, con := range s.cfg.Contenders {
				a, ok := s.Get(wl.Name, con.Name, callers)
				if !ok {
					continue
				}
				ideal := "all"
				if wl.Ideal > 0 {
					ideal = strconv.FormatInt(wl.Ideal, 10)
				}
				fmt.Fprintf(w, "| %s | %d | %.0f | %s | %s | %s | %s | %s | %s | %d / %s | %s | %.3f | %d |\n",
					con.Name, callers, a.PerSec, ratio(a.PerSec, rr.PerSec), ratio(a.PerSec, ul.PerSec), ratio(a.PerSec, bare.PerSec),
					fmtDur(a.P50), fmtDur(a.P99), fmtDur(a.P999), a.Admitted, ideal,
					strconv.FormatFloat(float64(a.CPUPerDecision)/1e3, 'f', 2, 64)+" µs", a.CallsPerDecision, a.Errors)
			}
		}
	}
	s.acceptance(w)
}

func (s *Summary) acceptance(w io.Writer) {
	const wl = "many keys"
	rr, ok2 := s.Get(wl, RedisRate, 64)
	ul, ok3 := s.Get(wl, Ulule, 64)
	bare, ok4 := s.Get(wl, Bare, 64)
	var b strings.Builder
	b.WriteString("\n")
	for _, name := range []string{RWSliding, RWSlidingEvalsha} {
		if rw, ok1 := s.Get(wl, name, 64); ok1 && ok2 && ok3 && ok4 {
			fmt.Fprintf(&b, "Many keys at 64 callers, %s makes %s the decisions/s of redis_rate, %s those of ulule, %s those of the bare script (medians of %d).\n",
				name, ratio(rw.PerSec, rr.PerSec), ratio(rw.PerSec, ul.PerSec), ratio(rw.PerSec, bare.PerSec), rw.Reps)
		}
	}
	on, ok1 := s.Get(wl, RWSliding, 1)
	off, ok2 := s.Get(wl, RWSlidingUnbatched, 1)
	if ok1 && ok2 {
		fmt.Fprintf(&b, "At 1 caller, p99 with batching %s, without %s (%s).\n", fmtDur(on.P99), fmtDur(off.P99), ratio(float64(on.P99), float64(off.P99)))
	}
	bare1, ok3 := s.Get(wl, Bare, 1)
	for _, name := range []string{RWSliding, RWSlidingEvalsha} {
		if rw, ok := s.Get(wl, name, 1); ok && ok3 {
			fmt.Fprintf(&b, "Many keys at 1 caller, %s makes %s the decisions/s of the bare script, at %s its p99 (%s against %s).\n",
				name, ratio(rw.PerSec, bare1.PerSec), ratio(float64(rw.P99), float64(bare1.P99)), fmtDur(rw.P99), fmtDur(bare1.P99))
		}
	}
	io.WriteString(w, b.String())
}
