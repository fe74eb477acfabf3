package xds_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/service/xds"
)

// TestNewNamesTheOptionAtFault: New refuses an option it cannot use, a
// nil one included, with an invalid-config error naming it.
func TestNewNamesTheOptionAtFault(t *testing.T) {
	apply := func(xds.Update) error { return nil }
	for _, tc := range []struct {
		opt  xds.Option
		want string
	}{
		{nil, "xds: option 0 is nil"},
		{xds.WithBackoff(time.Minute, time.Second), "xds: WithBackoff: want 0 < initial <= max, got 1m0s, 1s"},
		{xds.WithLogger(nil), "xds: WithLogger: logger must not be nil"},
	} {
		c, err := xds.New("127.0.0.1:1", apply, tc.opt)
		if c != nil || !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New with a bad option: %v, %v; want an invalid-config error saying %q", c, err, tc.want)
		}
	}
}
