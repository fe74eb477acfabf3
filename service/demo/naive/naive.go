// Package naive is a shared rate limit counter written the obvious, wrong
// way, for the demo's --race mode: GET the count, compare it with the limit
// in Go, SET count+1. Two round trips with nothing between them to stop
// another replica from reading the same count, so replicas that check at
// once admit more than the limit and overwrite each other's updates.
//
// It exists only to show that race next to ratewarden's atomic script;
// ratewarden never decides this way.
package naive

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/nilcheck"
	"github.com/ratewarden/ratewarden/service/demo/checkonly"
)

// Store is a ratewarden.Store for one limit per check over a Redis client.
// Its keys are prefix + "naive:{" + key + "}:" + the limit's scope, and
// expire after the limit's period. It only checks and resets.
type Store struct {
	checkonly.Rest
	c      rueidis.Client
	prefix string
}

// New returns a Store on c; the caller keeps c and closes it.
func New(c rueidis.Client, prefix string) (*Store, error) {
	if nilcheck.Is(c) {
		return nil, fmt.Errorf("naive: client must not be nil%s: %w", nilcheck.Describe(c), ratewarden.ErrInvalidConfig)
	}
	return &Store{c: c, prefix: prefix}, nil
}

func (s *Store) key(key string, l ratewarden.Limit) string {
	return s.prefix + "naive:{" + key + "}:" + l.Scope()
}

// Count returns the count Redis holds for key under l: less than what was
// admitted when replicas overwrote each other's updates.
func (s *Store) Count(ctx context.Context, key string, l ratewarden.Limit) (int64, error) {
	n, err := s.c.Do(ctx, s.c.B().Get().Key(s.key(key, l)).Build()).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		return 0, fmt.Errorf("naive: GET: %w", err)
	}
	return n, nil
}

// Check implements ratewarden.Store for one limit: the race is the point.
func (s *Store) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	if len(req.Limits) != 1 {
		return fmt.Errorf("naive: one limit per check, got %d: %w", len(req.Limits), ratewarden.ErrInvalidLimit)
	}
	l := req.Limits[0]
	k := s.key(req.Key, l)
	n, err := s.c.Do(ctx, s.c.B().Get().Key(k).Build()).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		return fmt.Errorf("naive: GET: %w: %w", err, ratewarden.ErrStoreUnavailable)
	}
	capacity := l.Capacity()
	allowed := n+req.Cost <= capacity
	res[0] = ratewarden.Result{Allowed: allowed, Limit: l, Remaining: max(capacity-n, 0)}
	if !allowed {
		res[0].RetryAfter = l.Period
		return nil
	}
	if req.Peek || req.Cost == 0 {
		return nil
	}
	// Another replica may have written since our GET; this SET does not know.
	err = s.c.Do(ctx, s.c.B().Set().Key(k).Value(strconv.FormatInt(n+req.Cost, 10)).Px(l.Period).Build()).Error()
	if err != nil {
		return fmt.Errorf("naive: SET: %w: %w", err, ratewarden.ErrStoreUnavailable)
	}
	res[0].Remaining = max(capacity-n-req.Cost, 0)
	return nil
}

// Reset implements ratewarden.Store.
func (s *Store) Reset(ctx context.Context, key string, limits ...ratewarden.Limit) error {
	for _, l := range limits {
		if err := s.c.Do(ctx, s.c.B().Del().Key(s.key(key, l)).Build()).Error(); err != nil {
			return fmt.Errorf("naive: DEL: %w: %w", err, ratewarden.ErrStoreUnavailable)
		}
	}
	return nil
}
