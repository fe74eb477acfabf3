// Package testredis gives tests real Redis, and is for tests only: it
// starts redis-server processes (through internal/redisproc, the launcher
// the demo and the benchmarks use too), a Redis Cluster of 3 primaries
// and 3 replicas and a Sentinel deployment on free loopback ports with
// persistence off, and stops them when the test ends. On top of the
// launcher's Server it adds what tests need: Restart, Freeze and Thaw,
// counters read from INFO (CommandCalls, ScriptCalls, CPU, ...) and
// WaitReplicated. A fault proxy (NewProxy) sits between a client and a
// server and drops, delays or resets traffic on demand.
//
// Tests fail (never skip) when redis-server is not installed: .ci/run
// installs it, and a correctness claim about Redis must run against Redis.
package testredis

import (
	"context"
	"syscall"
	"testing"

	"github.com/ratewarden/ratewarden/internal/redisproc"
)

// Server is one redis-server process on 127.0.0.1: the launcher's Server
// (Addr, Port, Do, Kill, Stop, StartAgain, Running, PID, Log) with the
// methods tests use on top.
type Server struct {
	*redisproc.Server
}

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
	return &Server{s}
}

// Restart starts the server again on its port, empty (no data, no
// scripts), killing it first if it runs; it fails tb when the server does
// not come back.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	if err := s.StartAgain(context.Background()); err != nil {
		tb.Fatalf("testredis: %v", err)
	}
}

// Freeze stops the server's process (SIGSTOP): connections stay open and
// accept bytes, nothing is answered, as on a host that stalls. Thaw
// resumes it. Both are no-ops once the server was killed.
func (s *Server) Freeze() error { return s.Signal(syscall.SIGSTOP) }

// Thaw resumes a server stopped by Freeze (SIGCONT).
func (s *Server) Thaw() error { return s.Signal(syscall.SIGCONT) }

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
