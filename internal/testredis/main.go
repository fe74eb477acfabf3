package testredis

import (
	"fmt"
	"os"
	"os/exec"
)

// StartMain is Start for a TestMain, which has no testing.TB: it launches
// a fresh redis-server on a free loopback port and returns it with the
// function that stops it and removes its directory. Packages whose Example
// functions talk to Redis use it to give them a server of their own.
func StartMain(extra ...string) (srv *Server, stop func(), err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, nil, fmt.Errorf("testredis: redis-server not found on PATH (install it: apt-get install redis-server; make test does): %w", err)
	}
	dir, err := os.MkdirTemp("", "testredis-")
	if err != nil {
		return nil, nil, fmt.Errorf("testredis: %w", err)
	}
	s, err := startWith(bin, dir, func(port int, dir string) []string {
		return append(serverArgs(port, dir), extra...)
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("testredis: could not start redis-server: %w", err)
	}
	return s, func() { s.Stop(); os.RemoveAll(dir) }, nil
}
