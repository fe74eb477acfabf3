package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/internal/mono"
)

// Micro-batching: the script evaluates a list of checks, so checks that
// arrive while calls are in flight wait in a queue and go out together as
// one script call. A check that finds a free lane goes out at once, from
// its caller's goroutine and on its caller's context: at low load nothing
// waits and nothing changes hands.
//
// A lane that finishes a call while checks are queued hands the queue to a
// goroutine that sends batches of up to size checks until the queue is
// empty and then ends, so no goroutine outlives the load.

// Defaults for WithBatchSize and WithBatchLanes.
const (
	DefaultBatchSize  = 64
	DefaultBatchLanes = 2
)

// States of a queued call. The caller and the batch sender race with
// compare-and-swap; the one that loses learns who owns the call.
const (
	stQueued    int32 = iota // in the queue; the caller owns nothing yet
	stSent                   // taken into a batch; the sender fills it
	stAbandoned              // the caller left (its context ended); whoever holds it frees it
	stDone                   // the reply is in; the caller owns it again
)

type batcher struct {
	ev    evaluator
	calls *sync.Pool // the Store's pool of *call
	size  int        // checks per script call, at most
	lanes int        // script calls in flight, at most

	mu    sync.Mutex
	busy  int     // lanes in use
	queue []*call // waiting checks; non-empty only while busy == lanes

	batches  sync.Pool // *batch
	expiries expiries  // the Store's deadlines of queued checks
}

// batch is the buffers of one batched script call.
type batch struct {
	calls []*call
	keys  []string
	args  []string
	out   []int64
}

func newBatcher(ev evaluator, calls *sync.Pool, size, lanes int) *batcher {
	b := &batcher{ev: ev, calls: calls, size: size, lanes: lanes}
	b.batches.New = func() any { return new(batch) }
	b.expiries.clock = mono.New()
	return b
}

// do runs c's check (c.keys, c.args) and returns the reply in c.out. It
// returns owned == false when the caller's context ended while c was
// queued or in flight: the error is then the context's, and c now belongs
// to the batcher, which frees it.
func (b *batcher) do(ctx context.Context, c *call) (owned bool, err error) {
	b.mu.Lock()
	if b.busy < b.lanes {
		b.busy++
		b.mu.Unlock()
		c.out, err = b.ev.eval(ctx, c.keys, c.args, c.out[:0])
		b.release()
		return true, err
	}
	c.ctx = ctx
	c.state.Store(stQueued)
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	var canceled, expired <-chan struct{}
	if bc, ok := ctx.(*boundedCtx); ok {
		// The Store's deadline: from a timer shared with the checks whose
		// deadlines fall in the same millisecond, not one of c's own.
		canceled, expired = bc.Context.Done(), b.expiries.at(bc.d)
	} else {
		canceled = ctx.Done()
	}
	select {
	case <-c.done:
		c.ctx = nil
		return true, c.err
	case <-canceled:
	case <-expired:
	}
	if c.state.CompareAndSwap(stQueued, stAbandoned) || c.state.CompareAndSwap(stSent, stAbandoned) {
		return false, ctx.Err()
	}
	<-c.done // the reply came in at the same moment
	c.ctx = nil
	return true, c.err
}

// release gives back the lane of a call that just finished, or, when
// checks are queued, keeps it for a sender goroutine.
func (b *batcher) release() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.busy--
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	go b.send()
}

// send holds one lane: it sends queued checks in batches until the queue
// is empty, then gives the lane back and returns.
func (b *batcher) send() {
	bt := b.batches.Get().(*batch)
	for {
		b.mu.Lock()
		b.take(bt)
		if len(bt.calls) == 0 {
			b.busy--
			b.mu.Unlock()
			break
		}
		b.mu.Unlock()
		b.run(bt)
	}
	b.batches.Put(bt)
}

// take moves up to size live checks from the head of the queue into bt,
// freeing those whose callers left. b.mu is held.
func (b *batcher) take(bt *batch) {
	n := 0
	for n < len(b.queue) && len(bt.calls) < b.size {
		c := b.queue[n]
		n++
		if c.state.CompareAndSwap(stQueued, stSent) {
			bt.calls = append(bt.calls, c)
		} else {
			b.free(c)
		}
	}
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
}

// run sends bt's checks as one script call and hands every check its part
// of the reply, or the call's error.
func (b *batcher) run(bt *batch) {
	bt.keys, bt.args = bt.keys[:0], bt.args[:0]
	for _, c := range bt.calls {
		bt.keys = append(bt.keys, c.keys...)
		bt.args = append(bt.args, c.args...)
	}
	ctx, cancel := batchContext(bt.calls)
	out, err := b.ev.eval(ctx, bt.keys, bt.args, bt.out[:0])
	cancel()
	bt.out = out[:0]
	if err == nil && len(out) != 1+4*len(bt.keys) {
		err = fmt.Errorf("batch reply has %d integers, want %d", len(out), 1+4*len(bt.keys))
	}
	pos := 1
	for _, c := range bt.calls {
		c.err = err
		if err == nil {
			m := 4 * len(c.keys)
			c.out = append(append(c.out[:0], out[0]), out[pos:pos+m]...)
			pos += m
		}
		if c.state.CompareAndSwap(stSent, stDone) {
			c.done <- struct{}{}
		} else {
			b.free(c)
		}
	}
	clear(bt.calls)
	bt.calls = bt.calls[:0]
	clear(bt.keys)
	clear(bt.args)
}

func (b *batcher) free(c *call) {
	c.reset()
	b.calls.Put(c)
}

// batchContext is the context of a call that carries several callers'
// checks: no one caller's cancellation may end it, so it keeps only the
// values of the first and the latest of their deadlines (none if any
// caller has none). A lone check keeps its caller's context.
func batchContext(calls []*call) (context.Context, context.CancelFunc) {
	first := calls[0].ctx
	if len(calls) == 1 {
		return first, func() {}
	}
	var last time.Time
	for _, c := range calls {
		d, ok := c.ctx.Deadline()
		if !ok {
			return context.WithoutCancel(first), func() {}
		}
		if d.After(last) {
			last = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(first), last)
}

// callState is embedded in call: what the batcher needs of a queued check.
type callState struct {
	ctx   context.Context
	err   error
	state atomic.Int32
	done  chan struct{} // capacity 1; empty whenever the call is in the pool
}

// queued is the number of checks waiting (tests).
func (b *batcher) queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// expiries hands out channels that close at the deadlines of queued
// checks, rounded up to the millisecond: one timer a millisecond for all
// the checks whose deadlines fall in it, where a context.WithDeadline per
// check would arm one each (a tenth of the client's CPU at 64 callers).
type expiries struct {
	clock mono.Clock // the milliseconds count on it

	mu     sync.Mutex
	recent [4]expiry // the latest few, most queued checks' deadlines
	next   int
}

type expiry struct {
	ms int64 // on clock
	ch chan struct{}
}

// at returns a channel closed at d, or up to a millisecond after.
func (x *expiries) at(d time.Time) <-chan struct{} {
	ms := (x.clock.At(d) + int64(time.Millisecond) - 1) / int64(time.Millisecond)
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, e := range x.recent {
		if e.ch != nil && e.ms == ms {
			return e.ch
		}
	}
	ch := make(chan struct{})
	time.AfterFunc(time.Duration(ms*int64(time.Millisecond)-x.clock.Now()), func() { close(ch) })
	x.recent[x.next] = expiry{ms: ms, ch: ch}
	x.next = (x.next + 1) % len(x.recent)
	return ch
}
