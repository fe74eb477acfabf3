package redisstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/redis/rueidis"
)

// floorLibrary holds the least a script can do for one decision, beside
// which BenchmarkScriptFloor puts the check function:
//
//   - floor_incr: the bare INCR+PEXPIRE script of the peer benchmarks (a
//     counter whose window starts at its first request, no clock);
//   - floor_time: Redis' clock alone (TIME), no key touched;
//   - floor_time_get_set: the commands a limiter on Redis' clock needs at
//     least (TIME, read the state, write it with its expiry), with no
//     decision between them.
const floorLibrary = `#!lua name=ratewarden_floor
redis.register_function('floor_incr', function(keys, args)
  local c = redis.call('INCR', keys[1])
  if c == 1 then redis.call('PEXPIRE', keys[1], args[1]) end
  return c
end)
redis.register_function('floor_time', function(keys, args)
  local t = redis.call('TIME')
  return {tonumber(t[1]), 1, 0, 0, 0}
end)
redis.register_function('floor_time_get_set', function(keys, args)
  local t = redis.call('TIME')
  local v = redis.call('GET', keys[1])
  redis.call('SET', keys[1], '1', 'PXAT', args[2])
  return {tonumber(t[1]), 1, 0, 0, 0}
end)
`

// BenchmarkScriptFloor measures what Redis spends per call (redis-µs/op)
// on the check function for one sliding-window check, and on the
// functions of floorLibrary, on keys that do not exist yet ("new") and on
// 1,000 keys that do ("existing"). The calls go 64 to a round trip, so the
// figure is the script's own work, with next to nothing of the network's
// per-request cost. docs/performance.md reads it.
func BenchmarkScriptFloor(b *testing.B) {
	srv := testredis.Start(b)
	c := newClient(b, srv.Addr)
	ctx := bg
	if err := c.Do(ctx, c.B().FunctionLoad().Replace().FunctionCode(floorLibrary).Build()).Error(); err != nil {
		b.Fatal(err)
	}
	code, fn, ok := library(script)
	if !ok {
		b.Fatal("the check script has no function library")
	}
	if err := c.Do(ctx, c.B().FunctionLoad().Replace().FunctionCode(code).Build()).Error(); err != nil {
		b.Fatal(err)
	}
	lim := ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: ratewarden.MaxRate, Period: time.Hour}
	var enc encCache
	e := enc.get(lim)
	head := checkHead(&ratewarden.Request{Cost: 1, Limits: []ratewarden.Limit{lim}})
	pxat := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	for _, f := range []struct {
		name string
		fn   string
		args []string
	}{
		{"bare_incr_pexpire", "floor_incr", []string{"3600000"}},
		{"time", "floor_time", nil},
		{"time_get_set", "floor_time_get_set", []string{"3600000", pxat}},
		{"check", fn, []string{head, e.arg}},
	} {
		for _, keys := range []string{"new", "existing"} {
			b.Run(f.name+"/"+keys, func(b *testing.B) {
				if err := c.Do(ctx, c.B().Flushall().Build()).Error(); err != nil {
					b.Fatal(err)
				}
				key := func(i int) string { return "floor:" + strconv.Itoa(i) + e.suffix }
				if keys == "existing" {
					key = func(i int) string { return "floor:" + strconv.Itoa(i%1000) + e.suffix }
					floorRound(b, c, f.fn, f.args, 0, 1000, key)
				}
				before, err := srv.CPU()
				if err != nil {
					b.Fatal(err)
				}
				const round = 64
				b.ResetTimer()
				for i := 0; i < b.N; i += round {
					floorRound(b, c, f.fn, f.args, i, min(round, b.N-i), key)
				}
				b.StopTimer()
				after, err := srv.CPU()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64((after-before).Nanoseconds())/1e3/float64(b.N), "redis-µs/op")
			})
		}
	}
}

// floorRound calls fn on the keys from..from+n-1 in one round trip, and
// fails the benchmark on any error.
func floorRound(b *testing.B, c rueidis.Client, fn string, args []string, from, n int, key func(int) string) {
	cmds := make(rueidis.Commands, 0, n)
	for i := from; i < from+n; i++ {
		cmds = append(cmds, c.B().Fcall().Function(fn).Numkeys(1).Key(key(i)).Arg(args...).Build())
	}
	for _, r := range c.DoMulti(bg, cmds...) {
		if err := r.Error(); err != nil {
			b.Fatalf("FCALL %s: %v", fn, err)
		}
	}
}
