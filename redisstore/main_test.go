package redisstore

import (
	"context"
	"testing"

	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/redis/rueidis"
)

// newClient returns a rueidis client for addr, closed when the test ends.
func newClient(tb testing.TB, addr string) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		tb.Fatalf("rueidis.NewClient(%s): %v", addr, err)
	}
	tb.Cleanup(c.Close)
	return c
}

// The rueidis evaluators of the tests: New's without and with
// WithFunctions (no WAIT, the default lanes).
var (
	evalshaOnly   = evalConfig{lanes: DefaultBatchLanes}
	withFunctions = evalConfig{lanes: DefaultBatchLanes, functions: true}
)

// storeOn makes a Store on ev, with opts validated as New validates them.
func storeOn(ev evaluator, opts ...Option) (*Store, error) {
	c, err := newConfig(opts, false)
	if err != nil {
		return nil, err
	}
	return newStore(ev, false, &c), nil
}

// openStore makes a production Store on a new client.
func openStore(tb testing.TB, addr string, opts ...Option) *Store {
	tb.Helper()
	s, err := New(newClient(tb, addr), opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return s
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

// redisTime returns Redis' TIME in microseconds.
func redisTime(tb testing.TB, srv *testredis.Server) int64 {
	tb.Helper()
	us, err := srv.Time()
	if err != nil {
		tb.Fatal(err)
	}
	return us
}

// commandStats returns the calls per command from INFO commandstats
// ("evalsha" -> 12).
func commandStats(tb testing.TB, srv *testredis.Server) map[string]int64 {
	tb.Helper()
	m, err := srv.CommandCalls()
	if err != nil {
		tb.Fatalf("INFO commandstats: %v", err)
	}
	return m
}

// scriptCalls is the number of script calls Redis has served (EVALSHA,
// EVAL and FCALL).
func scriptCalls(tb testing.TB, srv *testredis.Server) int64 {
	tb.Helper()
	n, err := srv.ScriptCalls()
	if err != nil {
		tb.Fatalf("INFO commandstats: %v", err)
	}
	return n
}

var bg = context.Background()
