package fallback

import (
	"context"
	"fmt"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/nilcheck"
	"github.com/ratewarden/ratewarden/memstore"
)

// Partitioned is a Store that keeps one breaker per partition of the key
// space: a set of Stores on the same primary, each with its own deadline,
// breaker and failure policy, and a function that says which one a key
// belongs to. Use it where one part of the primary can fail while the rest
// answers — a Redis Cluster primary holds only its slots — so that a
// failed shard degrades only its keys:
//
//	st, err := fallback.NewPartitioned(primary, 16,
//		func(key string) int { return redisstore.Slot(key) / 1024 }, // 16 slot groups
//		fallback.WithPolicy(fallback.LocalFallback))
//
// All partitions share one local store for LocalFallback (WithLocalStore
// overrides it) and log under the store's name with "/<partition>" added.
// Make one with NewPartitioned; the zero Partitioned is not usable.
type Partitioned struct {
	parts     []*Store
	partition func(key string) int
}

// NewPartitioned returns a Partitioned with n partitions, each a Store made
// by New(primary, opts...). partition maps a key to its partition, in [0, n).
func NewPartitioned(primary ratewarden.Store, n int, partition func(key string) int, opts ...Option) (*Partitioned, error) {
	switch {
	case nilcheck.Is(primary):
		return nil, fmt.Errorf("fallback: primary store must not be nil%s: %w", nilcheck.Describe(primary), ratewarden.ErrInvalidConfig)
	case n < 1:
		return nil, fmt.Errorf("fallback: partitions must be >= 1, got %d: %w", n, ratewarden.ErrInvalidConfig)
	case partition == nil:
		return nil, fmt.Errorf("fallback: partition function must not be nil: %w", ratewarden.ErrInvalidConfig)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	shared := opts[:len(opts):len(opts)]
	if cfg.local == nil {
		local, err := memstore.New()
		if err != nil {
			return nil, fmt.Errorf("fallback: local store: %w", err)
		}
		shared = append(shared, WithLocalStore(local))
	}
	p := &Partitioned{parts: make([]*Store, n), partition: partition}
	for i := range p.parts {
		st, err := New(primary, append(shared, WithName(fmt.Sprintf("%s/%d", cfg.name, i)))...)
		if err != nil {
			return nil, err
		}
		p.parts[i] = st
	}
	return p, nil
}

func (p *Partitioned) part(key string) (*Store, error) {
	i := p.partition(key)
	if i < 0 || i >= len(p.parts) {
		return nil, fmt.Errorf("fallback: partition function put a key in partition %d of %d: %w", i, len(p.parts), ratewarden.ErrInvalidConfig)
	}
	return p.parts[i], nil
}

// Check implements ratewarden.Store on the partition of req.Key. Like
// Store.Check it relies on the Limiter's validation of req and res.
func (p *Partitioned) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	st, err := p.part(req.Key)
	if err != nil {
		return err
	}
	return st.Check(ctx, req, res)
}

// Reset implements ratewarden.Store on the partition of key. Like
// Store.Reset it relies on the Limiter's validation of key and limits.
func (p *Partitioned) Reset(ctx context.Context, key string, limits ...ratewarden.Limit) error {
	st, err := p.part(key)
	if err != nil {
		return err
	}
	return st.Reset(ctx, key, limits...)
}

// State returns the worst state of any partition's breaker: StateOpen if
// one is open, else StateHalfOpen if one is half-open, else StateClosed.
func (p *Partitioned) State() State {
	worst := StateClosed
	for _, st := range p.parts {
		worst = max(worst, st.State())
	}
	return worst
}

// States returns every partition's breaker state, by partition.
func (p *Partitioned) States() []State {
	out := make([]State, len(p.parts))
	for i, st := range p.parts {
		out[i] = st.State()
	}
	return out
}

var _ ratewarden.Store = (*Partitioned)(nil)
