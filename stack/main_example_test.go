package stack_test

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

// TestMain gives the examples their redis-server and checks that nothing
// leaks goroutines (the tests start servers and clusters of their own).
func TestMain(m *testing.M) {
	childproc.Serve(runFailoverReplica) // a replica process of failover_test.go
	redis.SetLogger(quietLogger{})      // go-redis logs failed dials of the dead-server test
	srv, stop, err := testredis.StartMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	redisAddr = srv.Addr
	code := m.Run()
	stop()
	if code == 0 {
		// When a cluster client's first slot map replaces its seed
		// connections, rueidis closes them 5 s later from a goroutine of
		// its own, which ends by itself.
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
