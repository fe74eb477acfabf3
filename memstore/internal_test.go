package memstore

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/algo"
)

// These tests reach inside the store for what its API cannot show: states
// whose hashes collide (a 64-bit hash of a random seed never collides in a
// test run, so the chain is exercised by handing decide one hash for
// several keys) and the clock's base.

const t0 = 1_773_500_966_535_897 // µs: 2026-03-14, on no round boundary

// oneShard returns the single shard of a store bounded to max states.
func oneShard(t *testing.T, max int) *shard {
	t.Helper()
	s, err := New(WithShards(1), WithMaxKeys(max))
	if err != nil {
		t.Fatal(err)
	}
	return &s.shards[0]
}

// decideAt decides one unit for key under lim at now, with h as the hash
// of every key.
func decideAt(sh *shard, key string, lim ratewarden.Limit, now int64) ratewarden.Result {
	sc := scope{lim.Algorithm, lim.Period}
	hash := stateHash(0x5eed, sc)
	var o algo.Outcome
	sh.decide(&o, sh.find(hash, key, sc), hash, key, lim, now, 1, true)
	var r ratewarden.Result
	storeResult(&r, lim, &o)
	return r
}

// chainLen is the number of states stored at hash.
func chainLen(sh *shard, hash uint64) int {
	n := 0
	for e := sh.m[hash]; e != nil; e = e.next {
		n++
	}
	return n
}

// TestCollidingKeysKeepSeparateStates: keys with one hash share a map slot
// and nothing else; each is counted exactly, expires and is removed on its
// own, and n counts every chained state.
func TestCollidingKeysKeepSeparateStates(t *testing.T) {
	sh := oneShard(t, 100)
	hour := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 3, Period: time.Hour}
	sec := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 3, Period: time.Second}
	sc := scope{hour.Algorithm, hour.Period}
	hash := stateHash(0x5eed, sc)
	keys := []string{"a", "b", "c"}
	for i := range 3 {
		for _, k := range keys {
			if r := decideAt(sh, k, hour, t0); !r.Allowed || r.Remaining != int64(2-i) {
				t.Fatalf("%s, check %d: %+v, want admitted with %d left", k, i+1, r, 2-i)
			}
		}
	}
	for _, k := range keys {
		if r := decideAt(sh, k, hour, t0); r.Allowed {
			t.Fatalf("%s, check 4 of 3: admitted", k)
		}
	}
	if got := chainLen(sh, hash); got != 3 || sh.n != 3 || len(sh.m) != 1 {
		t.Fatalf("chain %d, n %d, map %d; want 3 states in one slot", got, sh.n, len(sh.m))
	}
	// A second scope of "b" lives at another hash.
	decideAt(sh, "b", sec, t0)
	if sh.n != 4 || len(sh.m) != 2 {
		t.Fatalf("n %d, map %d after a second scope; want 4 in 2 slots", sh.n, len(sh.m))
	}

	// Remove from the middle, the head and the tail of the chain.
	left := map[string]bool{"a": true, "b": true, "c": true}
	for _, k := range []string{"b", "c", "a"} {
		e := sh.find(hash, k, sc)
		if e == nil || !e.hasKey(k) {
			t.Fatalf("find %s: %v", k, e)
		}
		sh.remove(hash, e)
		delete(left, k)
		if sh.find(hash, k, sc) != nil {
			t.Fatalf("%s still found after remove", k)
		}
		for other := range left {
			if sh.find(hash, other, sc) == nil {
				t.Fatalf("%s lost when %s was removed", other, k)
			}
		}
	}
	if _, ok := sh.m[hash]; ok || sh.n != 1 {
		t.Fatalf("slot kept after its last state went, n %d", sh.n)
	}

	// Expiry: of three colliding states, the one past its window is
	// dropped and the others stay.
	sh = oneShard(t, 100)
	decideAt(sh, "a", hour, t0)
	decideAt(sh, "b", hour, t0)
	decideAt(sh, "c", hour, t0)
	sh.find(hash, "b", sc).expireAt = t0
	if !sh.dropExpired(hash, sh.m[hash], t0) {
		t.Fatal("dropExpired freed nothing")
	}
	if chainLen(sh, hash) != 2 || sh.n != 2 || sh.find(hash, "b", sc) != nil {
		t.Fatalf("after expiry: chain %d, n %d; want a and c", chainLen(sh, hash), sh.n)
	}
	// An expired state checked again starts over, in place.
	e := sh.find(hash, "a", sc)
	e.expireAt = t0
	if r := decideAt(sh, "a", hour, t0+1); !r.Allowed || r.Remaining != 2 {
		t.Fatalf("a after expiry: %+v, want a fresh window (2 left)", r)
	}
	if sh.find(hash, "a", sc) != e || sh.n != 2 {
		t.Fatal("an expired state checked again was not reused in place")
	}
}

// TestEvictInChains: a full shard whose states all collide evicts one of
// them, never the checking key's, and never more than the bound holds.
func TestEvictInChains(t *testing.T) {
	sh := oneShard(t, 4)
	lim := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Second}
	for i, k := range []string{"k0", "k1", "k2", "k3"} {
		decideAt(sh, k, lim, t0+int64(i)*1000) // k0 expires first
	}
	decideAt(sh, "k4", lim, t0+5000)
	hash := stateHash(0x5eed, scope{lim.Algorithm, lim.Period})
	if sh.n != 4 || chainLen(sh, hash) != 4 {
		t.Fatalf("n %d, chain %d; want the bound, 4", sh.n, chainLen(sh, hash))
	}
	if sh.find(hash, "k0", scope{lim.Algorithm, lim.Period}) != nil {
		t.Fatal("k0, closest to expiry, was not the victim")
	}
	if sh.find(hash, "k4", scope{lim.Algorithm, lim.Period}) == nil {
		t.Fatal("the new key's state is missing")
	}
}

// TestClockMatchesTimeNow: the store's clock reads what time.Now reads,
// within the instants around each reading, and takes a new base when its
// base is old or in the future.
func TestClockMatchesTimeNow(t *testing.T) {
	// time.Now reads the wall clock and then the monotonic one; a thread
	// descheduled between the two leaves a base behind the wall clock by
	// the delay, for up to resync. slack allows for that on a busy machine.
	const slack = 100 * time.Millisecond
	var c clock
	for i := range 1000 {
		before := time.Now().UnixMicro()
		got := c.nowMicro()
		after := time.Now().UnixMicro()
		if got < before-slack.Microseconds() || got > after {
			t.Fatalf("reading %d: %d µs, outside the time.Now readings %d and %d µs around it (less %v of slack below)", i, got, before, after, slack)
		}
	}
	for _, age := range []time.Duration{resync, 10 * time.Hour, -time.Minute} {
		old := time.Now().Add(-age)
		c.base.Store(&clockBase{t: old, us: old.UnixMicro()})
		before := time.Now().UnixMicro()
		got := c.nowMicro() // from a new base: a fresh time.Now, not behind before
		if b := c.base.Load(); b.t.Equal(old) || got < before {
			t.Errorf("base %v old: kept it (read %d, time.Now %d)", age, got, before)
		}
	}
}

// TestClockInBubble: in a testing/synctest bubble the clock is the bubble's,
// exactly, whether its base was taken outside the bubble or inside.
func TestClockInBubble(t *testing.T) {
	var c clock
	c.nowMicro() // a base from the real clock, with a monotonic reading
	synctest.Test(t, func(t *testing.T) {
		for _, d := range []time.Duration{0, time.Microsecond, 999 * time.Nanosecond, time.Second, time.Hour} {
			time.Sleep(d)
			if got, want := c.nowMicro(), time.Now().UnixMicro(); got != want {
				t.Fatalf("after sleeping %v: %d, want the bubble's %d", d, got, want)
			}
		}
	})
}

// TestEntryKeys: a state holds its own copy of its key, in the entry up to
// shortKey bytes and apart beyond, and matches that key only; an entry is
// 128 bytes on 64-bit platforms (part of the "about 200 bytes" a state
// costs, in the package doc).
func TestEntryKeys(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n != 128 && unsafe.Sizeof(uintptr(0)) == 8 {
		t.Errorf("entry is %d bytes on a 64-bit platform, want 128", n)
	}
	for _, n := range []int{1, shortKey - 1, shortKey, shortKey + 1, 1000} {
		big := strings.Repeat("k", n) + "-and-more"
		key := big[:n] // shares big's bytes
		var e entry
		e.setKey(key)
		if !e.hasKey(key) || !e.hasKey(strings.Clone(key)) {
			t.Errorf("%d-byte key: not matched by itself", n)
		}
		for _, other := range []string{key[:n-1], key + "k", "x" + key[1:], big} {
			if other != key && e.hasKey(other) {
				t.Errorf("%d-byte key: matches the %d-byte %q", n, len(other), other)
			}
		}
		if e.long != "" && unsafe.StringData(e.long) == unsafe.StringData(big) {
			t.Errorf("%d-byte key: kept the caller's bytes, not a copy", n)
		}
		if inline := e.n > 0; inline != (n <= shortKey) {
			t.Errorf("%d-byte key: inline %v, want %v", n, inline, n <= shortKey)
		}
	}
}
