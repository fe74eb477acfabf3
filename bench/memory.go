package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/redisproc"
	"github.com/ratewarden/ratewarden/redisstore"
)

// MemoryContender is a limiter whose Redis memory per limited key is
// measured: Checks requests for every key, all admitted.
type MemoryContender struct {
	Name   string
	Checks int // requests per key; a sliding log keeps one entry for each
	Open   func(addr string, lim Limit) (Instance, error)
}

// Memory contender names, as printed.
const (
	MemFixed   = "ratewarden fixed_window"
	MemSliding = "ratewarden sliding_window"
	MemToken   = "ratewarden token_bucket"
	MemLog     = "ratewarden sliding_log"
	MemUlule   = "ulule/limiter v3 (fixed window)"
	MemFloor   = "floor: one counter string with a TTL (INCR+PEXPIRE)"
)

// MemoryContenders returns ratewarden's four algorithms (the sliding log
// twice: with checks and with twice as many entries, for the cost of one
// entry), go-redis/redis_rate, ulule/limiter and the floor, checks requests
// per key each.
func MemoryContenders(checks int) []MemoryContender {
	rw := func(alg ratewarden.Algorithm) func(string, Limit) (Instance, error) {
		open := openRatewarden(alg, noDenyCache)
		return func(addr string, lim Limit) (Instance, error) { return open(addr, 1, lim) }
	}
	peer := func(open func(string, int, Limit) (Instance, error)) func(string, Limit) (Instance, error) {
		return func(addr string, lim Limit) (Instance, error) { return open(addr, memWorkers, lim) }
	}
	return []MemoryContender{
		{MemFixed, checks, rw(ratewarden.FixedWindow)},
		{MemSliding, checks, rw(ratewarden.SlidingWindow)},
		{MemToken, checks, rw(ratewarden.TokenBucket)},
		{MemLog, checks, rw(ratewarden.SlidingLog)},
		{MemLog, 2 * checks, rw(ratewarden.SlidingLog)},
		{RedisRate, checks, peer(openRedisRate)},
		{MemUlule, checks, peer(openUlule)},
		{MemFloor, checks, peer(openBare)},
	}
}

// memWorkers is the number of goroutines that send a memory cell's
// requests (for speed only: memory does not depend on it).
const memWorkers = 16

// MemoryCell is what one contender left in Redis.
type MemoryCell struct {
	Name   string
	Keys   int   // limited keys
	Checks int   // requests per key
	Stored int64 // keys in Redis afterwards (DBSIZE)
	Bytes  int64 // used_memory afterwards minus before
}

// PerKey is the memory per limited key, in bytes.
func (c MemoryCell) PerKey() float64 { return float64(c.Bytes) / float64(c.Keys) }

// MeasureMemory runs one memory cell: open the contender, warm it up
// (loading its script) and close it; FLUSHALL; read used_memory once only
// the bench's own admin connection is left; open the contender again and
// send checks requests for each key (round by round, every key once a
// round); close it, and read used_memory and DBSIZE again once its
// connections are gone. The slow log is turned off (and emptied) first:
// it keeps the arguments of slow commands, which depend on timing. So the delta is the keys' memory (values, names,
// expiries and the key tables), not connection buffers, which grow and
// shrink with traffic.
func MeasureMemory(ctx context.Context, r *Redis, mc MemoryContender, keys []string, lim Limit) (MemoryCell, error) {
	cell := MemoryCell{Name: mc.Name, Keys: len(keys), Checks: mc.Checks}
	if len(keys) == 0 || mc.Checks < 1 {
		return cell, fmt.Errorf("bench: a memory cell needs keys and at least one check: %w", ratewarden.ErrInvalidConfig)
	}
	in, err := mc.Open(r.Addr, lim)
	if err != nil {
		return cell, fmt.Errorf("bench: %s: open: %w", mc.Name, err)
	}
	_, err = in.Allow(ctx, "warm-up")
	in.Close()
	if err != nil {
		return cell, fmt.Errorf("bench: %s: warm-up: %w", mc.Name, err)
	}
	if err := r.FlushAll(ctx); err != nil {
		return cell, err
	}
	// The slow log keeps the arguments of slow commands (a batch of checks
	// on a busy machine): memory that depends on timing, not on keys.
	for _, cmd := range []rueidis.Completed{
		r.admin.B().ConfigSet().ParameterValue().ParameterValue("slowlog-log-slower-than", "-1").Build(),
		r.admin.B().SlowlogReset().Build(),
	} {
		if err := r.admin.Do(ctx, cmd).Error(); err != nil {
			return cell, fmt.Errorf("bench: turning the slow log off: %w", err)
		}
	}
	before, err := r.quietMemory(ctx)
	if err != nil {
		return cell, err
	}
	if in, err = mc.Open(r.Addr, lim); err != nil {
		return cell, fmt.Errorf("bench: %s: open: %w", mc.Name, err)
	}
	for round := range mc.Checks {
		if err = allowAll(ctx, in, keys); err != nil {
			err = fmt.Errorf("bench: %s: round %d: %w", mc.Name, round+1, err)
			break
		}
	}
	in.Close()
	if err != nil {
		return cell, err
	}
	after, err := r.quietMemory(ctx)
	if err != nil {
		return cell, err
	}
	cell.Bytes = after - before
	cell.Stored, err = r.admin.Do(ctx, r.admin.B().Dbsize().Build()).AsInt64()
	if err != nil {
		return cell, fmt.Errorf("bench: DBSIZE: %w", err)
	}
	return cell, nil
}

// quietMemory waits (up to 10 s) until the admin connection is the only
// client, lets serverCron finish any incremental rehash of the key tables,
// and reads used_memory.
func (r *Redis) quietMemory(ctx context.Context) (int64, error) {
	for i := 0; ; i++ {
		n, err := r.info(ctx, "clients", "connected_clients")
		if err != nil {
			return 0, err
		}
		if n <= 1 {
			break
		}
		if i == 200 {
			return 0, fmt.Errorf("bench: %d clients still connected after 10s", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	return r.info(ctx, "memory", "used_memory")
}

// info reads one integer field of an INFO section.
func (r *Redis) info(ctx context.Context, section, field string) (int64, error) {
	info, err := r.admin.Do(ctx, r.admin.B().Info().Section(section).Build()).ToString()
	if err != nil {
		return 0, fmt.Errorf("bench: INFO %s: %w", section, err)
	}
	n, err := redisproc.ParseInfoInt(info, field)
	if err != nil {
		return 0, fmt.Errorf("bench: INFO %s: %w", section, err)
	}
	return n, nil
}

// allowAll sends one request for every key from memWorkers goroutines;
// every one must be admitted.
func allowAll(ctx context.Context, in Instance, keys []string) error {
	var wg sync.WaitGroup
	errs := make([]error, memWorkers)
	for w := range memWorkers {
		wg.Go(func() {
			for i := w; i < len(keys); i += memWorkers {
				ok, err := in.Allow(ctx, keys[i])
				if err == nil && !ok {
					err = fmt.Errorf("%s: denied", keys[i])
				}
				if err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// MemoryKeys returns n key names of the kind the throughput workloads use:
// user:0, user:1, ...
func MemoryKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	return keys
}

// MeasureAllMemory runs every contender once, in order, on one server,
// after an unmeasured cell of the first one: a server's first cell leaves
// about 25 KB behind that is not the keys' (seen on Redis 7.0), which
// would otherwise count against whichever contender ran first.
func MeasureAllMemory(ctx context.Context, r *Redis, cs []MemoryContender, keys []string, lim Limit) ([]MemoryCell, error) {
	var cells []MemoryCell
	if len(cs) > 0 {
		if _, err := MeasureMemory(ctx, r, cs[0], keys, lim); err != nil {
			return nil, err
		}
	}
	for _, mc := range cs {
		c, err := MeasureMemory(ctx, r, mc, keys, lim)
		if err != nil {
			return cells, err
		}
		cells = append(cells, c)
	}
	return cells, nil
}

// memoryFloor returns the floor's cell, if it ran.
func memoryFloor(cells []MemoryCell) (MemoryCell, bool) {
	for _, c := range cells {
		if c.Name == MemFloor {
			return c, true
		}
	}
	return MemoryCell{}, false
}

// MemoryMarkdown writes the table of bytes per limited key, each against
// the floor, and the cost of one sliding-log entry when the log ran with
// two numbers of entries.
func MemoryMarkdown(w io.Writer, cells []MemoryCell, lim Limit) {
	floor, hasFloor := memoryFloor(cells)
	n := 0
	if len(cells) > 0 {
		n = cells[0].Keys
	}
	fmt.Fprintf(w, "\n### Redis memory per limited key (%d keys, limit %d per %v, ratewarden key format %d)\n\n", n, lim.Rate, lim.Period, redisstore.KeyFormat)
	fmt.Fprintln(w, "| contender | requests per key | keys stored | used_memory delta (bytes) | bytes per limited key | vs floor |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	var logs []MemoryCell
	for _, c := range cells {
		vs := "–"
		if hasFloor {
			vs = ratio(c.PerKey(), floor.PerKey())
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %.1f | %s |\n", c.Name, c.Checks, c.Stored, c.Bytes, c.PerKey(), vs)
		if c.Name == MemLog {
			logs = append(logs, c)
		}
	}
	if len(logs) == 2 && logs[1].Checks > logs[0].Checks {
		per := (logs[1].PerKey() - logs[0].PerKey()) / float64(logs[1].Checks-logs[0].Checks)
		fmt.Fprintf(w, "\nA sliding-log entry costs %.1f bytes (%d entries against %d per key); the log's key itself %.1f bytes.\n",
			per, logs[1].Checks, logs[0].Checks, logs[0].PerKey()-per*float64(logs[0].Checks))
	}
}
