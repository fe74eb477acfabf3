package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratewarden/ratewarden/internal/childproc"
	"github.com/ratewarden/ratewarden/internal/testredis"
)

// redisAddr is the Redis the examples talk to: in a program, yours. The
// tests point it at a redis-server of their own, so every example runs and
// its output is checked.
var redisAddr = "127.0.0.1:6379"

// TestMain serves the whole test binary (the package's own tests start
// servers of their own): in a child process it runs the child's job
// (procs_test.go); otherwise it gives the examples their redis-server and
// checks that nothing leaks goroutines.
func TestMain(m *testing.M) {
	childproc.Serve(runChild) // a replica process of procs_test.go
	// go-redis logs its pool's failed background dials, which the restart
	// and dead-server tests cause on purpose; their errors are asserted.
	redis.SetLogger(quietLogger{})
	srv, stop, err := testredis.StartMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	redisAddr = srv.Addr
	code := m.Run()
	stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
