package redisstore

import (
	"context"

	"github.com/ratewarden/ratewarden"
)

// CheckAt is Check that also returns the instant (µs, Redis TIME) the
// script decided at, for the tests of package redisstore_test: a
// reservation's slot on Redis' own clock is that instant + Result.Delay.
func CheckAt(ctx context.Context, s *Store, req *ratewarden.Request, res []ratewarden.Result) (int64, error) {
	return s.check(ctx, req, res)
}
