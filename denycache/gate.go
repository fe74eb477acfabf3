package denycache

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"

	"github.com/ratewarden/ratewarden"
)

// The gate keeps a hot key's checks from all reaching the store at once
// when they cannot all pass. Without it, every check that arrives while
// the key's first denial is on its way misses the cache: on a Cluster,
// where checks are not batched, about 140 of 64 callers' checks were in
// flight before the first denial came back. So, per key and limit, no
// more checks go to the store at once than the store last said were left
// (at least one); the others wait for one of them to come back, then look
// at the cache again. A key with plenty left is not held back; one at the
// edge of its limit, or one whose checks arrive together before the store
// said anything about it, waits a round trip per turn. Nothing is kept for
// a key once none of its checks is in flight or waiting.

const gateShards = 64

type gate struct {
	seed    maphash.Seed
	shards  [gateShards]gateShard
	flights sync.Pool // *flight, zeroed
}

type gateShard struct {
	mu sync.Mutex
	m  map[entryKey]*flight
	_  [40]byte // keeps shards on cache lines of their own
}

// flight is the checks of one key and limit on their way to the store.
// It lives while any is in flight.
type flight struct {
	inflight  int64
	remaining int64         // what the store last reported left; -1: nothing yet
	wake      chan struct{} // closed when a check comes back; nil while nobody waits
}

func newGate() *gate {
	g := &gate{seed: maphash.MakeSeed()}
	for i := range g.shards {
		g.shards[i].m = make(map[entryKey]*flight)
	}
	return g
}

func (g *gate) shard(k entryKey) *gateShard {
	return &g.shards[maphash.String(g.seed, k.key)%gateShards]
}

// enter lets a check of k go to the store and returns its flight, or,
// when enough checks of k are in flight already, returns a channel that
// is closed when one of them comes back.
func (g *gate) enter(k entryKey) (*flight, <-chan struct{}) {
	sh := g.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	f := sh.m[k]
	if f == nil {
		f, _ = g.flights.Get().(*flight)
		if f == nil {
			f = new(flight)
		}
		f.remaining = -1
		sh.m[k] = f
	}
	if f.inflight >= max(1, f.remaining) {
		if f.wake == nil {
			f.wake = make(chan struct{})
		}
		return nil, f.wake
	}
	f.inflight++
	return f, nil
}

// leave records that a check of k came back, with what the store said is
// left (known false: it failed), and wakes the checks waiting.
func (g *gate) leave(k entryKey, f *flight, remaining int64, known bool) {
	sh := g.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	f.inflight--
	if known {
		f.remaining = remaining
	}
	woken := f.wake != nil
	if woken {
		close(f.wake)
		f.wake = nil
	}
	// The woken checks come back for what this one learned; without them,
	// nothing is kept.
	if f.inflight == 0 && !woken {
		delete(sh.m, k)
		*f = flight{}
		g.flights.Put(f)
	}
}

// wait waits for w or the end of ctx.
func wait(ctx context.Context, w <-chan struct{}) error {
	select {
	case <-w:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("denycache: waiting for a check of the same key: %w: %w", ratewarden.ErrStoreUnavailable, ctx.Err())
	}
}
