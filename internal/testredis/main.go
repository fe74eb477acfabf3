package testredis

import (
	"context"
	"fmt"
	"os"

	"github.com/ratewarden/ratewarden/internal/redisproc"
)

// StartMain is Start for a TestMain, which has no testing.TB: it launches
// a fresh redis-server on a free loopback port and returns it with the
// function that stops it and removes its directory. Packages whose Example
// functions talk to Redis use it to give them a server of their own.
func StartMain(extra ...string) (srv *Server, stop func(), err error) {
	dir, err := os.MkdirTemp("", "testredis-")
	if err != nil {
		return nil, nil, fmt.Errorf("testredis: %w", err)
	}
	s, err := redisproc.Start(context.Background(), redisproc.WithDir(dir), redisproc.WithArgs(extra...))
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("testredis: %w", err)
	}
	return &Server{s}, func() { s.Stop(); os.RemoveAll(dir) }, nil
}
