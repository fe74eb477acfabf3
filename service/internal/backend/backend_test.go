package backend_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/internal/backend"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestNewRedisRejectsBadOptions: a bad option fails NewRedis with a clear
// error, not the first decision later.
func TestNewRedisRejectsBadOptions(t *testing.T) {
	rs := testredis.Start(t)
	for _, tc := range []struct {
		opt  backend.Option
		want string
	}{
		{backend.WithTimeout(0), "timeout must be > 0, got 0s"},
		{backend.WithTimeout(-time.Second), "timeout must be > 0, got -1s"},
		{backend.WithReplicas(0), "replicas must be >= 1, got 0"},
		{backend.WithProbeInterval(0), "probe interval must be > 0, got 0s"},
		{backend.WithLogger(nil), "logger must not be nil"},
	} {
		b, err := backend.NewRedis("redis://"+rs.Addr, tc.opt)
		if err == nil {
			b.Close()
			t.Errorf("want %q: NewRedis succeeded", tc.want)
			continue
		}
		if !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewRedis = %v, want an invalid-config error saying %q", err, tc.want)
		}
	}
	// Good options: every failure policy's store is ready to decide.
	b, err := backend.NewRedis("redis://"+rs.Addr, backend.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, fp := range config.FailurePolicies {
		if _, err := b.Store(fp); err != nil {
			t.Errorf("Store(%s): %v", fp, err)
		}
	}
}
