// Package gctune paces a long-running process's garbage collector by
// headroom as well as by ratio.
//
// By default (GOGC=100) a collection starts once the heap has grown by as
// much as was live after the previous one. A service that keeps a few MiB
// live and allocates a few KiB per request then collects dozens of times a
// second, and the collector's work per cycle, with the assists it asks of
// the request goroutines, is a fifth of the service's CPU per request
// (docs/performance.md). Start sets the GC percentage after each collection
// so that the next one starts once the heap has grown by about the larger
// of what is live and a fixed headroom: a small heap gets the headroom
// (the whole heap stays near it), a large one (a memstore with millions of
// keys) is paced as by default.
//
// A memory limit (GOMEMLIMIT, debug.SetMemoryLimit) still holds: the
// runtime collects sooner near it, whatever the percentage.
package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// The runtime's heap goal is the larger of live + (live + stacks +
// globals) × percent / 100 and minHeap × percent / 100: the three make the
// base that the percentage applies to, and minHeap the least base.
const minHeap = 4 << 20

// MaxHeadroom is the largest headroom Start takes, 1 TiB: its percentage
// over the runtime's 4 MiB minimum, 26,214,400, stays well inside the
// runtime's int32.
const MaxHeadroom = 1 << 40

var baseMetrics = [3]string{"/gc/heap/live:bytes", "/gc/scan/stack:bytes", "/gc/scan/globals:bytes"}

// tuner is the state of a Start: the finalizer of an object made for each
// collection reaches it (see arm).
type tuner struct {
	headroom uint64

	mu      sync.Mutex // guards what follows; the finalizer goroutine and stop share it
	stopped bool
	prev    int // the percentage before Start, restored by stop
	cur     int // the percentage set last
	sample  [len(baseMetrics)]metrics.Sample
}

// Start paces collections by headroom bytes, as the package comment says,
// until stop is called, which restores the percentage that was set before
// (GOGC's, or debug.SetGCPercent's). The percentage is never below 100 nor
// below what was set before, so Start only ever collects less often. A
// headroom of 0, a collector turned off (GOGC=off), or another Start in
// effect leaves it all as it is. A headroom over MaxHeadroom counts as
// MaxHeadroom.
func Start(headroom uint64) (stop func()) {
	headroom = min(headroom, MaxHeadroom)
	if headroom == 0 || !active.CompareAndSwap(false, true) {
		return func() {}
	}
	prev := debug.SetGCPercent(100)
	debug.SetGCPercent(prev)
	if prev < 0 {
		active.Store(false)
		return func() {}
	}
	t := &tuner{headroom: headroom, prev: prev, cur: prev}
	for i, name := range baseMetrics {
		t.sample[i].Name = name
	}
	t.mu.Lock()
	t.adjust()
	t.mu.Unlock()
	arm(t)
	return t.stop
}

func (t *tuner) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.stopped = true
	debug.SetGCPercent(t.prev)
	active.Store(false)
}

// active is set while a Start is in effect: the percentage is the
// process's, so two tuners would undo each other.
var active atomic.Bool

// percent is the percentage that makes the heap grow by the larger of
// base (what is live, stacks and globals) and t.headroom before the next
// collection, and no less than what was set before Start.
func (t *tuner) percent(base uint64) int {
	return max(int(t.headroom*100/max(base, minHeap)), 100, t.prev)
}

// adjust sets the percentage for what is live now, unless it is within
// an eighth of the one set last (each change recomputes the heap goal).
// The caller holds t.mu.
func (t *tuner) adjust() {
	metrics.Read(t.sample[:])
	var base uint64
	for _, s := range t.sample {
		if s.Value.Kind() == metrics.KindUint64 {
			base += s.Value.Uint64()
		}
	}
	p := t.percent(base)
	if d := p - t.cur; d > t.cur/8 || -d > t.cur/8 {
		debug.SetGCPercent(p)
		t.cur = p
	}
}

// cycle is garbage made for one collection: its finalizer runs after the
// collection that finds it unreachable, adjusts the percentage and makes
// the next. Its pointer keeps it out of the tiny allocator, whose blocks
// hold several objects and may never be freed.
type cycle struct{ t *tuner }

func arm(t *tuner) { runtime.SetFinalizer(&cycle{t: t}, collected) }

func collected(c *cycle) {
	t := c.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.adjust()
	arm(t)
}
