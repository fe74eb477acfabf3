package lease

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/redisstore"
)

var bg = context.Background()

// openStore makes a redisstore.Store on a rueidis client of its own,
// closed when the test ends.
func openStore(tb testing.TB, addr string, opts ...redisstore.Option) *redisstore.Store {
	tb.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		tb.Fatalf("rueidis.NewClient(%s): %v", addr, err)
	}
	tb.Cleanup(c.Close)
	// Nothing here is about deadlines: a busy machine must only make a
	// call slower, not fail it.
	s, err := redisstore.New(c, append([]redisstore.Option{redisstore.WithTimeout(time.Minute)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// openLease makes a redisstore.Store on a client of its own and a lease
// Store over it, closed (giving units back) when the test ends unless
// closed before.
func openLease(tb testing.TB, addr string, opts ...Option) (*redisstore.Store, *Store) {
	tb.Helper()
	s := openStore(tb, addr)
	l, err := New(s, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close(bg) })
	return s, l
}

// do runs a command through testredis (a client independent of the code
// under test) and fails the test on error.
func do(tb testing.TB, srv *testredis.Server, args ...string) string {
	tb.Helper()
	r, err := srv.Do(args...)
	if err != nil {
		tb.Fatalf("redis %v: %v", args, err)
	}
	return r
}

// scriptCalls is the number of EVALSHA and EVAL calls Redis has served.
func scriptCalls(tb testing.TB, srv *testredis.Server) int64 {
	tb.Helper()
	n, err := srv.ScriptCalls()
	if err != nil {
		tb.Fatalf("INFO commandstats: %v", err)
	}
	return n
}

// redisTime returns Redis' TIME in microseconds.
func redisTime(tb testing.TB, srv *testredis.Server) int64 {
	tb.Helper()
	us, err := srv.Time()
	if err != nil {
		tb.Fatal(err)
	}
	return us
}

// check runs one check through st and fails the test on error.
func check(tb testing.TB, st ratewarden.Store, key string, cost int64, peek bool, limits ...ratewarden.Limit) []ratewarden.Result {
	tb.Helper()
	res := make([]ratewarden.Result, len(limits))
	if err := st.Check(bg, &ratewarden.Request{Key: key, Limits: limits, Cost: cost, Peek: peek}, res); err != nil {
		tb.Fatalf("check %s cost %d: %v", key, cost, err)
	}
	return res
}

// windowCount reads a fixed window's count from Redis (key format 2: the
// count itself, an integer; see docs/redis.md).
func windowCount(tb testing.TB, srv *testredis.Server, key string) int64 {
	tb.Helper()
	v := do(tb, srv, "GET", key)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		tb.Fatalf("window state %q, want a count", v)
	}
	return n
}

// bucketTAT reads a token bucket's TAT (µs, rounded down) from Redis (key
// format 2: F*1000+d, the TAT d µs before the key's expiry, 1 µs more
// before it when F > 0; see docs/redis.md).
func bucketTAT(tb testing.TB, srv *testredis.Server, key string) int64 {
	tb.Helper()
	v, err := strconv.ParseInt(do(tb, srv, "GET", key), 10, 64)
	if err != nil {
		tb.Fatalf("token bucket state: %v", err)
	}
	at, err := strconv.ParseInt(do(tb, srv, "PEXPIRETIME", key), 10, 64)
	if err != nil || at < 0 {
		tb.Fatalf("token bucket expiry %d: %v", at, err)
	}
	tat := at*1000 - v%1000
	if v/1000 > 0 {
		tat--
	}
	return tat
}
