package stack

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden/internal/mono"
	"github.com/ratewarden/ratewarden/redisstore"
)

// A breaker per primary. On a Cluster each primary holds some slots and
// fails on its own, so each front keeps one breaker per primary, and a key
// goes to the breaker of the primary that serves its slot now, as the
// cluster's slot map (CLUSTER SLOTS) says. A failover moves the slots to
// the promoted replica, whose breaker is a fresh one: keys come back as
// soon as the map shows the move, and keys of the other primaries never
// share a breaker with the failed one.

// DefaultTopologyRefresh is how old the slot map may get before a check
// starts a refresh (WithTopologyRefresh).
const DefaultTopologyRefresh = time.Second

// maxPrimaries is the number of breakers each front keeps for primaries.
// Primaries are numbered as they first own slots; past this many, the
// numbers are reused for primaries that no longer own any.
const maxPrimaries = 128

// slotMap fetches the cluster's slot ranges and their primaries.
type slotMap func(ctx context.Context) ([]slotRange, error)

type slotRange struct {
	from, to int
	primary  string // host:port
}

// topology maps a key to the number of the primary that serves its slot.
type topology struct {
	fetch slotMap
	every time.Duration
	clock mono.Clock

	owner   atomic.Pointer[[slots]uint16] // slot -> primary number
	fetched atomic.Int64                  // clock.Now() at the last refresh
	busy    atomic.Bool                   // a refresh is under way

	mu      sync.Mutex
	numbers map[string]uint16 // primary -> number; guarded by mu
}

// newTopology starts with the slots split into groups of 16384/groups, one
// number each (what the cluster is taken to look like until the first
// refresh), and refreshes once, waiting at most a second for it.
func newTopology(fetch slotMap, every time.Duration, groups int) *topology {
	t := &topology{fetch: fetch, every: every, clock: mono.New(), numbers: map[string]uint16{}}
	var start [slots]uint16
	for s := range start {
		start[s] = uint16(s * groups / slots)
	}
	t.owner.Store(&start)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	t.refresh(ctx)
	return t
}

// partition is the fallback.NewPartitioned function: the number of the
// primary that serves key's slot. It starts a refresh when the map is due.
func (t *topology) partition(key string) int {
	if time.Duration(t.clock.Now()-t.fetched.Load()) >= t.every && t.busy.CompareAndSwap(false, true) {
		go func() {
			defer t.busy.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			t.refresh(ctx)
		}()
	}
	return int(t.owner.Load()[redisstore.Slot(key)])
}

// refresh fetches the slot map and publishes it. A failed fetch keeps the
// map it has (the next check past the interval tries again).
func (t *topology) refresh(ctx context.Context) {
	ranges, err := t.fetch(ctx)
	t.fetched.Store(t.clock.Now())
	if err != nil || len(ranges) == 0 {
		return
	}
	next := *t.owner.Load()
	t.mu.Lock()
	live := map[string]bool{}
	for _, r := range ranges {
		live[r.primary] = true
	}
	for _, r := range ranges {
		n, ok := t.numbers[r.primary]
		if !ok {
			n = t.number(live)
			t.numbers[r.primary] = n
		}
		for s := max(r.from, 0); s <= min(r.to, slots-1); s++ {
			next[s] = n
		}
	}
	t.mu.Unlock()
	t.owner.Store(&next)
}

// number returns a number for a primary seen for the first time: the
// lowest one no primary holds, or, when all are held, one of a primary
// that owns no slots now. t.mu is held.
func (t *topology) number(live map[string]bool) uint16 {
	var used [maxPrimaries]bool
	for _, n := range t.numbers {
		used[n] = true
	}
	for n, u := range used {
		if !u {
			return uint16(n)
		}
	}
	for addr, n := range t.numbers {
		if !live[addr] {
			delete(t.numbers, addr)
			return n
		}
	}
	return 0 // more than maxPrimaries primaries at once: they share
}

// live returns the numbers of the primaries that own slots now, in order.
func (t *topology) live() []int {
	var seen [maxPrimaries]bool
	for _, n := range t.owner.Load() {
		seen[n] = true
	}
	var out []int
	for n, ok := range seen {
		if ok {
			out = append(out, n)
		}
	}
	return out
}

// primaries returns the primaries known to own slots, by number.
func (t *topology) primaries() map[int]string {
	live := map[int]bool{}
	for _, n := range t.live() {
		live[n] = true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[int]string{}
	for addr, n := range t.numbers {
		if live[int(n)] {
			out[int(n)] = addr
		}
	}
	return out
}

// rueidisSlots reads CLUSTER SLOTS through a rueidis cluster client.
func rueidisSlots(c rueidis.Client) slotMap {
	return func(ctx context.Context) ([]slotRange, error) {
		rows, err := c.Do(ctx, c.B().ClusterSlots().Build()).ToArray()
		if err != nil {
			return nil, fmt.Errorf("stack: CLUSTER SLOTS: %w", err)
		}
		out := make([]slotRange, 0, len(rows))
		for _, row := range rows {
			f, err := row.ToArray()
			if err != nil || len(f) < 3 {
				return nil, fmt.Errorf("stack: CLUSTER SLOTS: malformed row")
			}
			from, err1 := f[0].AsInt64()
			to, err2 := f[1].AsInt64()
			node, err3 := f[2].ToArray()
			if err1 != nil || err2 != nil || err3 != nil || len(node) < 2 {
				return nil, fmt.Errorf("stack: CLUSTER SLOTS: malformed row")
			}
			host, _ := node[0].ToString()
			port, err := node[1].AsInt64()
			if err != nil {
				return nil, fmt.Errorf("stack: CLUSTER SLOTS: malformed port")
			}
			out = append(out, slotRange{from: int(from), to: int(to), primary: host + ":" + strconv.FormatInt(port, 10)})
		}
		return out, nil
	}
}

// goRedisSlots reads CLUSTER SHARDS (Redis 7) through a go-redis cluster
// client, and CLUSTER SLOTS where Redis does not know it (6.2).
func goRedisSlots(c *redis.ClusterClient) slotMap {
	return func(ctx context.Context) ([]slotRange, error) {
		shards, err := c.ClusterShards(ctx).Result()
		if err != nil {
			return goRedisOldSlots(ctx, c, err)
		}
		var out []slotRange
		for _, sh := range shards {
			for _, n := range sh.Nodes {
				if n.Role != "master" || n.Health == "fail" {
					continue
				}
				addr := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
				for _, r := range sh.Slots {
					out = append(out, slotRange{from: int(r.Start), to: int(r.End), primary: addr})
				}
			}
		}
		return out, nil
	}
}

func goRedisOldSlots(ctx context.Context, c *redis.ClusterClient, shardsErr error) ([]slotRange, error) {
	//lint:ignore SA1019 Redis 6.2, which the library supports, has no CLUSTER SHARDS
	rows, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("stack: CLUSTER SHARDS: %v; CLUSTER SLOTS: %w", shardsErr, err)
	}
	out := make([]slotRange, 0, len(rows))
	for _, r := range rows {
		if len(r.Nodes) == 0 {
			continue
		}
		out = append(out, slotRange{from: r.Start, to: r.End, primary: r.Nodes[0].Addr})
	}
	return out, nil
}
