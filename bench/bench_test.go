package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(orphanHelperEnv) == "1" {
		orphanHelper() // TestRedisDiesWithItsParent's child: never returns
	}
	goleak.VerifyTestMain(m)
}

// orphanHelperEnv makes the test binary start a redis-server, print its
// address and pid, and exit without stopping it.
const orphanHelperEnv = "RATEWARDEN_BENCH_ORPHAN_HELPER"

func orphanHelper() {
	r, err := StartRedis()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%s %d\n", r.Addr, r.srv.PID())
	os.Exit(0) // no r.Stop(): the server must go with this process
}

func startRedis(tb testing.TB) *Redis {
	tb.Helper()
	r, err := StartRedis()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(r.Stop)
	return r
}

// TestContendersExact runs every contender through every workload against
// a real redis-server, each cell bounded by a request count (twice the
// largest limit), not by time: no errors, every request on many keys
// admitted, exactly the limit admitted on one key (one instance and four),
// and a table naming every contender. The limits' periods are stretched to
// 30 days so that no token refills, and no window slides, however slowly
// the cells run; the only time bound is a cap on the whole run.
func TestContendersExact(t *testing.T) {
	r := startRedis(t)
	const callers = 8
	wls := Workloads()
	var requests int64
	for i := range wls {
		wls[i].Limit.Period = 30 * 24 * time.Hour
		requests = max(requests, 2*wls[i].Ideal)
	}
	ctx, cancel := context.WithTimeout(context.Background(), runCap(t, 5*time.Minute))
	defer cancel()
	s, err := Run(ctx, r, Config{Callers: []int{callers}, Reps: 1, Requests: requests,
		Contenders: Contenders(), Workloads: wls, FailOnError: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range wls {
		for _, c := range Contenders() {
			a, ok := s.Get(w.Name, c.Name, callers)
			if !ok {
				t.Fatalf("%s / %s did not run", w.Name, c.Name)
			}
			cell := s.cells[cellKey(w.Name, c.Name, callers)][0]
			switch {
			case a.Errors != 0:
				t.Errorf("%s / %s: %d errors", w.Name, c.Name, a.Errors)
			case cell.Decisions != requests:
				t.Errorf("%s / %s: %d decisions, want the %d requests sent", w.Name, c.Name, cell.Decisions, requests)
			case w.Ideal == 0 && cell.Admitted != cell.Decisions:
				t.Errorf("%s / %s: admitted %d of %d", w.Name, c.Name, cell.Admitted, cell.Decisions)
			case w.Ideal > 0 && a.Admitted != w.Ideal:
				t.Errorf("%s / %s: admitted %d of %d, want %d", w.Name, c.Name, a.Admitted, cell.Decisions, w.Ideal)
			}
			// Consistency of the bookkeeping, not speed: every figure is
			// there and the percentiles are ordered.
			if a.P50 <= 0 || a.P99 < a.P50 || a.P999 < a.P99 || a.CPUPerDecision <= 0 || a.PerSec <= 0 {
				t.Errorf("%s / %s: implausible cell %+v", w.Name, c.Name, a)
			}
		}
	}
	var out bytes.Buffer
	s.Markdown(&out)
	for _, c := range Contenders() {
		if n := strings.Count(out.String(), "| "+c.Name+" | 8 |"); n != len(wls) {
			t.Errorf("table has %d rows for %s, want %d:\n%s", n, c.Name, len(wls), out.String())
		}
	}
}

// TestRunCellCountNeedsTime: a count-bounded cell whose context ends before
// its requests are decided fails and says how many were, rather than
// reporting a short cell.
func TestRunCellCountNeedsTime(t *testing.T) {
	r := startRedis(t)
	w := Workloads()[1] // hot key flood
	ctx, cancel := context.WithCancel(context.Background())
	slow := Contender{Name: "cancels its context", Open: func(string, int, Limit) (Instance, error) {
		return &cancelling{cancel: cancel}, nil
	}}
	_, err := RunCell(ctx, r, slow, w, 2, Bound{Requests: 1_000_000}, nil)
	if err == nil || !strings.Contains(err.Error(), "of 1000000 requests decided") || !errors.Is(err, context.Canceled) {
		t.Fatalf("RunCell = %v, want an error saying how many of the 1000000 requests were decided", err)
	}
}

// cancelling admits everything and cancels the cell's context at its 100th
// request (after the warm-up).
type cancelling struct {
	n      atomic.Int64
	cancel context.CancelFunc
}

func (c *cancelling) Allow(ctx context.Context, _ string) (bool, error) {
	if c.n.Add(1) == 101 {
		c.cancel()
	}
	return true, ctx.Err()
}

func (c *cancelling) Close() {}

// runCap is how long a test may let a run take: want, or less if the test
// binary's -timeout ends sooner (leaving time to report).
func runCap(t *testing.T, want time.Duration) time.Duration {
	if dl, ok := t.Deadline(); ok {
		if left := time.Until(dl) - 30*time.Second; left < want {
			return max(left, time.Second)
		}
	}
	return want
}

func TestHistogram(t *testing.T) {
	var h hist
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Microsecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {0.999, 999 * time.Microsecond}} {
		got := h.quantile(tc.q)
		if got < tc.want || float64(got) > float64(tc.want)*1.04 {
			t.Errorf("quantile(%v) = %v, want %v within 4%%", tc.q, got, tc.want)
		}
	}
	for v := uint64(0); v < 1<<20; v = v*3/2 + 1 {
		if b := bucket(v); upper(b) < v || (b > 0 && upper(b-1) >= v) {
			t.Fatalf("value %d in bucket %d [%d, %d]", v, b, upper(b-1)+1, upper(b))
		}
	}
}

// BenchmarkManyKeys runs each contender on 100,000 keys from 64 concurrent
// callers (RunParallel), all admitted, against one redis-server. Besides
// ns/op it reports Redis CPU per decision.
func BenchmarkManyKeys(b *testing.B) { benchManyKeys(b, 64) }

// BenchmarkOneCaller is BenchmarkManyKeys with one caller deciding one
// request after the other: the latency a lone request sees, and what each
// decision costs Redis when nothing shares a round trip.
func BenchmarkOneCaller(b *testing.B) { benchManyKeys(b, 1) }

func benchManyKeys(b *testing.B, callers int) {
	r := startRedis(b)
	ctx := context.Background()
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	lim := Limit{Rate: 1_000_000_000, Period: time.Hour}
	for _, c := range Contenders() {
		b.Run(strings.NewReplacer(" ", "_", ",", "", "/", "_", "+", "_").Replace(c.Name), func(b *testing.B) {
			if err := r.FlushAll(ctx); err != nil {
				b.Fatal(err)
			}
			in, err := c.Open(r.Addr, callers, lim)
			if err != nil {
				b.Fatal(err)
			}
			defer in.Close()
			if _, err := in.Allow(ctx, "warm-up"); err != nil {
				b.Fatal(err)
			}
			before, err := r.Stats(ctx)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			if callers == 1 {
				b.ResetTimer()
				k := 0
				for b.Loop() {
					ok, err := in.Allow(ctx, keys[k%len(keys)])
					if err != nil || !ok {
						b.Fatalf("Allow: %v, %v", ok, err)
					}
					k++
				}
			} else {
				var next atomic.Uint64
				b.SetParallelism((callers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					k := next.Add(1) * 7919
					for pb.Next() {
						k++
						ok, err := in.Allow(ctx, keys[k%uint64(len(keys))])
						if err != nil || !ok {
							b.Errorf("Allow: %v, %v", ok, err)
							return
						}
					}
				})
			}
			b.StopTimer()
			after, err := r.Stats(ctx)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric((after.CPU-before.CPU)*1e6/float64(b.N), "redis-µs/op")
		})
	}
}
