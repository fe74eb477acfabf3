package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

// These tests change the process's GC percentage: none runs in parallel,
// and each puts back what it found.

func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

func cycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// sink keeps the last allocation reachable, so the compiler cannot drop
// the allocations.
var sink []byte

// churn allocates n bytes of garbage in 4 KiB pieces, keeping nothing.
func churn(n int) {
	for range n / 4096 {
		sink = make([]byte, 4096)
	}
	sink = nil
}

// TestFewerCollections: the same garbage costs several times fewer
// collections with 64 MiB of headroom than at the default percentage,
// with this test's live heap of a few MiB.
func TestFewerCollections(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	const garbage = 512 << 20
	runtime.GC()
	c0 := cycles()
	churn(garbage)
	byDefault := cycles() - c0

	stop := Start(64 << 20)
	runtime.GC() // measure from a collection that the tuner has seen
	waitAdjusted(t)
	c0 = cycles()
	churn(garbage)
	tuned := cycles() - c0
	stop()
	// 512 MiB over 64 MiB of growth each: 8 collections, and a few
	// more for the runtime's own allocations. Fewer would mean the heap
	// grew by more than the headroom.
	if tuned < 6 || tuned > 12 || tuned*3 > byDefault {
		t.Fatalf("%d MiB of garbage: %d collections tuned, %d at GOGC=100; want 6 to 12, and at most a third of the default's", garbage>>20, tuned, byDefault)
	}
	t.Logf("%d MiB of garbage: %d collections tuned, %d at GOGC=100", garbage>>20, tuned, byDefault)
}

// waitAdjusted waits until a collection's finalizer has run since the
// call (one runs after each collection that finds the last one's garbage).
func waitAdjusted(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	runtime.SetFinalizer(&cycle{}, func(*cycle) { close(done) })
	deadline := time.After(10 * time.Second)
	for {
		runtime.GC()
		select {
		case <-done:
			return
		case <-deadline:
			t.Fatal("no finalizer ran within 10s of collections")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestStopRestores: Start raises the percentage for a small heap; stop
// puts back the one set before, and later collections leave it alone.
func TestStopRestores(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(150))
	stop := Start(256 << 20)
	waitAdjusted(t)
	if p := gcPercent(); p <= 150 {
		t.Errorf("with 256 MiB of headroom over a test's heap: GC percent %d, want above 150", p)
	}
	stop()
	stop() // a second stop changes nothing
	if p := gcPercent(); p != 150 {
		t.Fatalf("after stop: GC percent %d, want 150 back", p)
	}
	waitAdjusted(t)
	waitAdjusted(t)
	if p := gcPercent(); p != 150 {
		t.Fatalf("collections after stop: GC percent %d, want 150 still", p)
	}
}

// TestNoChange: no headroom, or a collector turned off, leaves the
// percentage as it is.
func TestNoChange(t *testing.T) {
	for _, tc := range []struct {
		name           string
		before         int
		headroom       uint64
		wantAfterStart int
	}{
		{"headroom 0", 100, 0, 100},
		{"GOGC=off", -1, 64 << 20, -1},
		{"another Start in effect", 100, 64 << 20, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer debug.SetGCPercent(debug.SetGCPercent(tc.before))
			if tc.name == "another Start in effect" {
				active.Store(true)
				defer active.Store(false)
			}
			stop := Start(tc.headroom)
			defer stop()
			if p := gcPercent(); p != tc.wantAfterStart {
				t.Fatalf("GC percent %d after Start, want %d", p, tc.wantAfterStart)
			}
		})
	}
}

// TestPercent: the larger of live and the headroom, never under 100 or
// the percentage set before, over a base of at least the runtime's 4 MiB.
func TestPercent(t *testing.T) {
	for _, tc := range []struct {
		headroom, live uint64
		prev, want     int
	}{
		{64 << 20, 4 << 20, 100, 1600},
		{64 << 20, 64 << 20, 100, 100},
		{64 << 20, 1 << 30, 100, 100},   // a large heap: as by default
		{64 << 20, 0, 100, 1600},        // before the first collection
		{64 << 20, 16 << 10, 100, 1600}, // the runtime's 4 MiB minimum
		{64 << 20, 32 << 20, 300, 300},  // never under what was set
	} {
		tu := &tuner{headroom: tc.headroom, prev: tc.prev}
		if got := tu.percent(tc.live); got != tc.want {
			t.Errorf("headroom %d, live %d, before %d: percent %d, want %d", tc.headroom, tc.live, tc.prev, got, tc.want)
		}
	}
}
