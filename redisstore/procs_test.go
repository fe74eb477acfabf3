package redisstore_test

// Acceptance across processes: replicas of a service are the test binary
// run again with a job (internal/childproc; TestMain hands it to
// runChild), each with its own Go runtime, rueidis client, Store and
// ratewarden.Limiter, on one redis-server, as in production. They wait
// for capacity (Limiter.Wait), settle costs (Limiter.Reserve) and hold
// permits (Limiter.AcquireWait) on shared keys; the parent adds up what
// they report. Every loop is bounded, every address is loopback.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/childproc"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/redisstore"
	"github.com/redis/rueidis"
)

// procJob is what one child process does.
type procJob struct {
	Kind       string // "wait", "settle", "race", "permits", "hold"
	Addr       string
	Key        string
	Limit      string // ratewarden.ParseLimit
	Goroutines int
	Start, End time.Time // wall clock: when the work starts, when its contexts end
	// settle, race: each reservation's estimate; settle: the actual cost.
	Estimate, Actual int64
	Rounds           int // race, permits: per goroutine
	// permits, hold: the concurrency limit, its ttl, how long a permit
	// is held.
	Max  int64
	TTL  time.Duration
	Hold time.Duration
}

// procReport is what a child measured.
type procReport struct {
	// wait: per admission, its slot on Redis' clock (the instant the
	// reservation was decided + Result.Delay, µs) and the wall-clock
	// instant Wait returned (µs); Early counts returns before the slot.
	Slots, Returned []int64
	Early           int
	// Cut counts reservations whose slot came before End but whose Wait
	// still ended with the context: its deadline and the slot's timer
	// fired together (a process that did not run meanwhile), and the
	// deadline won.
	Cut   int
	Ended map[string]int // how the goroutines' loops ended
	// settle, race: reservations admitted and settled, and the sum of
	// their actual costs; Applied is the settle's Applied[0].
	Settled, Actual, Applied int64
	// permits: per hold, [Acquire returned, Release called) (wall, ns).
	Holds [][2]int64
}

// runChild runs one child's job (childproc.Serve).
func runChild(spec []byte) (any, error) {
	var job procJob
	if err := json.Unmarshal(spec, &job); err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{job.Addr}, DisableCache: true})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	s, err := redisstore.New(c)
	if err != nil {
		return nil, err
	}
	var lim ratewarden.Limit
	if job.Limit != "" {
		if lim, err = ratewarden.ParseLimit(job.Limit); err != nil {
			return nil, err
		}
	}
	time.Sleep(time.Until(job.Start))
	switch job.Kind {
	case "wait":
		return job.wait(s, lim)
	case "settle":
		return job.settle(s, lim)
	case "race":
		return job.race(s, lim)
	case "permits":
		return job.permits(s)
	case "hold":
		return nil, job.hold(s)
	}
	return nil, fmt.Errorf("unknown job %q", job.Kind)
}

// clocked is the Store of one goroutine: the Redis Store, remembering the
// instant (Redis TIME, µs) its latest check was decided at; the rest (a
// canceled Wait giving its reservation back) is the Redis Store's.
type clocked struct {
	*redisstore.Store
	now  int64
	last ratewarden.Result // of the latest check
}

func (c *clocked) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	now, err := redisstore.CheckAt(ctx, c.Store, req, res)
	c.now, c.last = now, ratewarden.Result{}
	if err == nil {
		c.last = res[0]
	}
	return err
}

// wait: Goroutines goroutines call Wait on Key until their contexts end at
// End, and report every admission's slot and return.
func (job *procJob) wait(s *redisstore.Store, lim ratewarden.Limit) (*procReport, error) {
	rep := &procReport{Ended: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, job.Goroutines)
	for range job.Goroutines {
		wg.Go(func() {
			ctx, cancel := context.WithDeadline(context.Background(), job.End)
			defer cancel()
			w := &clocked{Store: s}
			l, err := ratewarden.New(w)
			if err != nil {
				errs <- err
				return
			}
			ended := "bound"
			for range 10_000 {
				r, err := l.Wait(ctx, job.Key, lim)
				ret := time.Now()
				if err != nil {
					switch {
					case errors.Is(err, ratewarden.ErrWouldExceedDeadline):
						ended = "would exceed the deadline"
					case ctx.Err() != nil:
						ended = "context ended"
						if w.last.Allowed && w.now+w.last.Delay.Microseconds() <= job.End.UnixMicro() {
							mu.Lock()
							rep.Cut++
							mu.Unlock()
						}
					default:
						errs <- err
						return
					}
					break
				}
				slot := w.now + r.Delay.Microseconds()
				mu.Lock()
				rep.Slots = append(rep.Slots, slot)
				rep.Returned = append(rep.Returned, ret.UnixMicro())
				if ret.UnixMicro() < slot {
					rep.Early++
				}
				mu.Unlock()
			}
			mu.Lock()
			rep.Ended[ended]++
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	return rep, <-errs
}

// settle: one reservation of Estimate, settled at Actual.
func (job *procJob) settle(s *redisstore.Store, lim ratewarden.Limit) (*procReport, error) {
	l, err := ratewarden.New(s)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	rv, err := l.Reserve(ctx, job.Key, job.Estimate, lim)
	if err != nil || !rv.Allowed {
		return nil, fmt.Errorf("reserve %d: %+v, %v", job.Estimate, rv, err)
	}
	st, err := rv.Settle(ctx, job.Actual)
	if err != nil {
		return nil, err
	}
	return &procReport{Settled: 1, Actual: job.Actual, Applied: st.Applied[0]}, nil
}

// race: Goroutines goroutines reserve Estimate and settle a random actual
// cost (0 to 5), Rounds times each.
func (job *procJob) race(s *redisstore.Store, lim ratewarden.Limit) (*procReport, error) {
	l, err := ratewarden.New(s)
	if err != nil {
		return nil, err
	}
	rep := &procReport{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, job.Goroutines)
	for range job.Goroutines {
		wg.Go(func() {
			ctx := context.Background()
			for range job.Rounds {
				rv, err := l.Reserve(ctx, job.Key, job.Estimate, lim)
				if err == nil && !rv.Allowed {
					err = fmt.Errorf("reservation denied: %+v", rv.Decision)
				}
				if err != nil {
					errs <- err
					return
				}
				time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond) // others reserve and settle meanwhile
				actual := rand.Int64N(6)
				st, err := rv.Settle(ctx, actual)
				if err == nil && actual != job.Estimate && st.Applied[0] != actual-job.Estimate {
					err = fmt.Errorf("settle %d of %d applied %d", actual, job.Estimate, st.Applied[0])
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				rep.Settled++
				rep.Actual += actual
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	return rep, <-errs
}

// permits: Goroutines goroutines take one of Max permits of Key
// (AcquireWait), hold it for Hold and release it, Rounds times each,
// and report each hold's span as they saw it.
func (job *procJob) permits(s *redisstore.Store) (*procReport, error) {
	l, err := ratewarden.New(s)
	if err != nil {
		return nil, err
	}
	rep := &procReport{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, job.Goroutines)
	for range job.Goroutines {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for range job.Rounds {
				p, err := l.AcquireWait(ctx, job.Key, job.Max, job.TTL)
				if err != nil {
					errs <- err
					return
				}
				from := time.Now()
				time.Sleep(job.Hold)
				to := time.Now()
				if err := p.Release(ctx); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				rep.Holds = append(rep.Holds, [2]int64{from.UnixNano(), to.UnixNano()})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	return rep, <-errs
}

// hold: take all Max permits of Key, say so (childproc.Ready), and keep them
// (extending every TTL/4) until killed, or for two minutes at most.
func (job *procJob) hold(s *redisstore.Store) error {
	l, err := ratewarden.New(s)
	if err != nil {
		return err
	}
	ctx := context.Background()
	held := make([]*ratewarden.Permit, job.Max)
	for i := range held {
		p, err := l.Acquire(ctx, job.Key, job.Max, job.TTL)
		if err != nil || !p.Acquired {
			return fmt.Errorf("permit %d: %+v, %v", i, p, err)
		}
		held[i] = p
	}
	childproc.Ready()
	for range 8 * int(2*time.Minute/job.TTL) {
		time.Sleep(job.TTL / 4)
		for _, p := range held {
			if err := p.Extend(ctx, job.TTL); err != nil {
				return err
			}
		}
	}
	return errors.New("not killed within two minutes")
}

// procServer starts a redis-server of the test's own: the process tests
// count its script calls.
func procServer(t *testing.T) (*testredis.Server, *redisstore.Store) {
	t.Helper()
	srv := testredis.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return srv, s
}

// scriptCalls is the number of script calls Redis has served.
func scriptCalls(t *testing.T, srv *testredis.Server) int64 {
	t.Helper()
	n, err := srv.ScriptCalls()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// startIn is the wall-clock start of a children's run: time for every
// child to start, on a busy machine.
const startIn = 3 * time.Second

// TestProcsWait: 4 processes × 16 goroutines call Wait on one key limited
// to 50/s (token bucket, burst 1) until their contexts end 5 s after the
// start, all at the same instant. The reservations' slots, on Redis'
// clock, are 20 ms apart: 250 ± 2 admissions, at most 5 + 1 in any
// 100 ms, no Wait returns before its slot, and each admission costs at
// most 2 script calls.
func TestProcsWait(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: waiters in 4 processes; make test runs it")
	}
	srv, _ := procServer(t)
	const procs, goroutines, span = 4, 16, 5 * time.Second
	lim := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 50, Period: time.Second, Burst: 1}
	start := time.Now().Add(startIn)
	job := procJob{Kind: "wait", Addr: srv.Addr, Key: "vendor", Limit: lim.String(), Goroutines: goroutines, Start: start, End: start.Add(span)}
	before := scriptCalls(t, srv)
	reps := childproc.Run[procReport](t, procs, job, startIn+span+2*time.Minute)
	calls := scriptCalls(t, srv) - before

	var slots, returned []int64
	early, cut := 0, int64(0)
	ended := map[string]int{}
	for _, r := range reps {
		slots = append(slots, r.Slots...)
		returned = append(returned, r.Returned...)
		early += r.Early
		cut += int64(r.Cut)
		for k, n := range r.Ended {
			ended[k] += n
		}
	}
	admitted := int64(len(slots))
	if admitted == 0 {
		t.Fatal("nothing admitted")
	}
	slices.Sort(slots)
	slices.Sort(returned)
	const window = 100_000 // µs
	maxSlots, maxReturns := maxInWindow(slots, window), maxInWindow(returned, window)
	perAdmission := float64(calls) / float64(admitted)
	// The schedule from the first slot to the end: one every 20 ms.
	first := time.UnixMicro(slots[0])
	scheduled := int64(job.End.Sub(first)/(20*time.Millisecond)) + 1
	t.Logf("admitted %d (schedule from the first slot, %v after the start: %d; the 5 s at 50/s: 250; slots before the end lost to the deadline: %d); most slots in a 100 ms window: %d; most Wait returns in a 100 ms window: %d; %d script calls, %.2f per admission; loops ended: %v",
		admitted, first.Sub(start), scheduled, cut, maxSlots, maxReturns, calls, perAdmission, ended)
	if early > 0 {
		t.Errorf("%d Waits returned before their slot", early)
	}
	if maxSlots > 5+1 {
		t.Errorf("%d slots in one 100 ms window, want at most 5 + burst 1", maxSlots)
	}
	// One every 20 ms from the first slot until the contexts ended, ± 2;
	// a slot whose timer fired with the deadline may be lost (counted in
	// cut), never one more admitted.
	if admitted > scheduled+2 || admitted+cut < scheduled-2 {
		t.Errorf("admitted %d (and %d lost to the deadline), want %d ± 2", admitted, cut, scheduled)
	}
	// 250 ± 2 when the first admission came at the start (a machine that
	// started the children late shifts the whole schedule; checked above).
	if first.Sub(start) < 20*time.Millisecond && (admitted > 252 || admitted+cut < 248) {
		t.Errorf("admitted %d (and %d lost to the deadline) in 5 s at 50/s, want 250 ± 2", admitted, cut)
	}
	if perAdmission > 2 {
		t.Errorf("%d script calls for %d admissions: %.2f each, want at most 2", calls, admitted, perAdmission)
	}
}

// maxInWindow is the most instants of sorted in any window [a, a + w).
func maxInWindow(sorted []int64, w int64) int {
	best, j := 0, 0
	for i := range sorted {
		for sorted[i]-sorted[j] >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// TestProcsSettle: reserve 100 and settle 30 in one process, on a limit
// of 1000 per minute: another client sees the 70 given back exactly; a
// settlement of 130 charges 30 more; then 4 processes × 16 goroutines
// reserve and settle, racing, and the count ends at the sum of the
// actual costs. For the exact algorithms, a sliding log and a fixed
// window (its minute aligned so the run stays inside it).
func TestProcsSettle(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: settlements in 4 processes; make test runs it")
	}
	srv, s := procServer(t)
	l, err := ratewarden.New(s)
	if err != nil {
		t.Fatal(err)
	}
	remaining := func(key string, lim ratewarden.Limit) int64 {
		t.Helper()
		r, err := l.Peek(context.Background(), key, lim)
		if err != nil {
			t.Fatal(err)
		}
		return r.Remaining
	}
	for _, lim := range []ratewarden.Limit{
		{Algorithm: ratewarden.SlidingLog, Rate: 1000, Period: time.Minute},
		{Algorithm: ratewarden.FixedWindow, Rate: 1000, Period: time.Minute},
	} {
		t.Run(lim.Algorithm.String(), func(t *testing.T) {
			if lim.Algorithm == ratewarden.FixedWindow {
				// The run takes seconds: start it in a window with 30 s left.
				if left := time.Minute - time.Duration(time.Now().UnixNano())%time.Minute; left < 30*time.Second {
					time.Sleep(left + 100*time.Millisecond)
				}
			}
			key := "tokens:" + lim.Algorithm.String()
			base := procJob{Addr: srv.Addr, Key: key, Limit: lim.String(), Start: time.Now(), Estimate: 100}
			job := base
			job.Kind, job.Actual = "settle", 30
			r := childproc.Run[procReport](t, 1, job, 2*time.Minute)[0]
			if got := remaining(key, lim); got != 970 || r.Applied != -70 {
				t.Fatalf("reserve 100, settle 30: Remaining %d from another client, applied %d; want 970, -70", got, r.Applied)
			}
			job.Actual = 130
			r = childproc.Run[procReport](t, 1, job, 2*time.Minute)[0]
			if got := remaining(key, lim); got != 840 || r.Applied != 30 {
				t.Fatalf("reserve 100, settle 130: Remaining %d, applied %d; want 840, +30", got, r.Applied)
			}

			race := base
			race.Kind, race.Key, race.Estimate, race.Goroutines, race.Rounds = "race", key+":race", 5, 16, 2
			race.Start = time.Now().Add(startIn)
			reps := childproc.Run[procReport](t, 4, race, startIn+2*time.Minute)
			var settled, actual int64
			for _, r := range reps {
				settled += r.Settled
				actual += r.Actual
			}
			if settled != 4*16*2 {
				t.Fatalf("%d reservations settled, want %d", settled, 4*16*2)
			}
			got := remaining(race.Key, lim)
			t.Logf("%v: %d racing reservations of 5 settled at %d units in all; Remaining %d", lim, settled, actual, got)
			if got != lim.Rate-actual {
				t.Fatalf("after racing settlements Remaining %d, want %d - %d = %d", got, lim.Rate, actual, lim.Rate-actual)
			}
		})
	}
}

// TestProcsPermits: 4 processes × 32 goroutines take one of 10 permits
// (AcquireWait), hold it 20 ms and release it. The holds as the callers
// saw them (from Acquire's return to the Release call, inside the real
// holds, so their overlap cannot overstate) overlap 10 deep at the peak
// and never more. Then a process holding all 10 permits (ttl 2 s) is
// SIGKILLed: the parent gets all 10 again within ttl + 1 s.
func TestProcsPermits(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: permits in 4 processes; make test runs it")
	}
	srv, s := procServer(t)
	l, err := ratewarden.New(s)
	if err != nil {
		t.Fatal(err)
	}
	const max, ttl = 10, 2 * time.Second
	// Never more than 10 held, in any run. All 10 seen at once takes the
	// handovers to be quick, which a stalled machine can starve: up to 3
	// runs to see it.
	for run := 1; ; run++ {
		job := procJob{Kind: "permits", Addr: srv.Addr, Key: "jobs", Goroutines: 32, Rounds: 5, Max: max, TTL: time.Minute, Hold: 20 * time.Millisecond, Start: time.Now().Add(startIn)}
		reps := childproc.Run[procReport](t, 4, job, startIn+3*time.Minute)
		var holds [][2]int64
		for _, r := range reps {
			holds = append(holds, r.Holds...)
		}
		if want := 4 * 32 * 5; len(holds) != want {
			t.Fatalf("%d holds reported, want %d", len(holds), want)
		}
		peak := maxOverlap(holds)
		t.Logf("run %d: %d holds of 20 ms across 4 processes; most held at once, as the callers saw it: %d", run, len(holds), peak)
		if peak > max {
			t.Fatalf("%d permits overlapped, want at most %d", peak, max)
		}
		if n := do(t, srv, "EXISTS", s.PermitKey("jobs")); n != "0" {
			t.Fatalf("the permit set outlived every release")
		}
		if peak == max {
			break
		}
		if run == 3 {
			t.Fatalf("the peak stayed below %d permits in %d runs", max, run)
		}
	}

	// A holder killed with its permits.
	victim := procJob{Kind: "hold", Addr: srv.Addr, Key: "crash", Max: max, TTL: ttl, Start: time.Now()}
	holder := childproc.Start(t, victim, time.Minute)
	if p, err := l.Acquire(context.Background(), "crash", max, ttl); err != nil || p.Acquired || p.Held != max {
		t.Fatalf("Acquire while the victim holds all: %+v, %v; want refused", p, err)
	}
	at := holder.Kill(t)
	ctx, cancel := context.WithTimeout(context.Background(), ttl+time.Minute)
	defer cancel()
	got := make([]time.Duration, max)
	var wg sync.WaitGroup
	errs := make(chan error, max)
	for i := range max {
		wg.Go(func() {
			p, err := l.AcquireWait(ctx, "crash", max, ttl)
			if err != nil {
				errs <- err
				return
			}
			got[i] = time.Since(at)
			if !p.Acquired {
				errs <- fmt.Errorf("AcquireWait returned %+v", p)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	recovered := slices.Max(got)
	t.Logf("SIGKILL of a process holding %d permits (ttl %v): all %d acquired again %v after the kill (the first after %v)", max, ttl, max, recovered.Round(time.Millisecond), slices.Min(got).Round(time.Millisecond))
	if recovered > ttl+time.Second {
		t.Errorf("the killed holder's permits came back after %v, want within ttl + 1 s = %v", recovered, ttl+time.Second)
	}
	if slices.Min(got) < ttl/2 {
		t.Errorf("a permit of the killed holder came back after %v, before its ttl could have run out (extended every %v)", slices.Min(got), ttl/4)
	}
}

// maxOverlap is the most spans [from, to) that contain one instant.
func maxOverlap(spans [][2]int64) int {
	type edge struct {
		at int64
		d  int
	}
	edges := make([]edge, 0, 2*len(spans))
	for _, s := range spans {
		edges = append(edges, edge{s[0], 1}, edge{s[1], -1})
	}
	// Ends before starts at one instant: [from, to) spans that only touch
	// do not overlap.
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at != edges[j].at {
			return edges[i].at < edges[j].at
		}
		return edges[i].d < edges[j].d
	})
	n, best := 0, 0
	for _, e := range edges {
		n += e.d
		best = max(best, n)
	}
	return best
}

// do runs a command on srv through testredis and fails the test on error.
func do(t *testing.T, srv *testredis.Server, args ...string) string {
	t.Helper()
	r, err := srv.Do(args...)
	if err != nil {
		t.Fatalf("redis %v: %v", args, err)
	}
	return r
}
