// Package testredis gives tests real Redis: it starts redis-server
// processes, a Redis Cluster and a Sentinel deployment on free loopback
// ports with persistence off (through internal/redisproc, the one
// launcher tests, the demo and the benchmarks share), stops them when the
// test ends, and puts a fault proxy (NewProxy) between a client and a
// server.
//
// Tests fail (never skip) when redis-server is not installed: .ci/run
// installs it, and a correctness claim about Redis must run against Redis.
package testredis

import (
	"context"
	"testing"

	"github.com/ratewarden/ratewarden/internal/redisproc"
)

// Server is one redis-server process on 127.0.0.1 (see redisproc.Server:
// Do, Kill, Restart, Running, WaitReplicated, CommandCalls, ...).
type Server = redisproc.Server

// Start launches a fresh redis-server on a free loopback port with no
// persistence, waits until it answers PING, and registers its shutdown
// with tb.Cleanup. Extra arguments (e.g. "--maxmemory", "10mb") are appended
// to the command line.
func Start(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	s, err := redisproc.Start(context.Background(), redisproc.WithDir(tb.TempDir()), redisproc.WithArgs(extra...))
	if err != nil {
		tb.Fatalf("testredis: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// FreePort asks the kernel for a free TCP port on 127.0.0.1.
func FreePort() (int, error) { return redisproc.FreePort() }

// Ping returns nil when addr answers PING with PONG (within 5 s).
func Ping(addr string) error { return redisproc.Ping(addr) }

// Do sends one command to addr over a fresh connection (rueidis) and
// returns the reply as text (integers and simple strings as is, bulk
// strings as their content, arrays flattened with newlines, nil as
// "(nil)"). It lets tests inspect Redis without depending on the client
// under test. It waits up to 30 s for the reply.
func Do(addr string, args ...string) (string, error) { return redisproc.Do(addr, args...) }
