package stack

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/denycache"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/internal/nilcheck"
	"github.com/ratewarden/ratewarden/lease"
	"github.com/ratewarden/ratewarden/redisstore"
)

// Defaults for New.
const (
	// DefaultDenyCache is the default bound on remembered denials.
	DefaultDenyCache = denycache.DefaultMaxEntries
	// DefaultSlotGroups is how many groups of slots a Cluster front's
	// breakers stand for until the first slot map is read (a breaker per
	// primary after that), and the count WithSlotGroups is measured
	// against.
	DefaultSlotGroups = 16
)

// slots is the number of Redis Cluster hash slots.
const slots = 16384

// Option configures a Stack. Options only record their value; New
// validates the collected configuration and fails with an error wrapping
// ratewarden.ErrInvalidConfig that names the setting. When an option is
// given twice, the last one counts (WithRedis, WithLeases and WithFallback
// add up).
type Option func(*config)

type config struct {
	redis      []redisstore.Option
	leases     []lease.Option
	leased     bool
	denyCache  int
	fallback   []fallback.Option
	slotGroups int
	groupsSet  bool // WithSlotGroups was given: static groups, not a breaker per primary
	refresh    time.Duration
}

// WithRedis passes options to the script store (redisstore.New or
// redisstore.NewGoRedis): a key prefix, batching. Several calls add up.
func WithRedis(opts ...redisstore.Option) Option {
	return func(c *config) { c.redis = append(c.redis, opts...) }
}

// WithLeases turns lease mode on (it is off by default), configured by
// opts (lease.New): checks of hot keys are answered from capacity this
// replica leases from Redis in batches. The lease layer sits directly on
// the script store, whose client it runs its own script on, under the deny
// cache, which then remembers the denials of leased and plain checks alike.
// Call Stack.Close before closing the client, to give unused units back.
// Several calls add up.
func WithLeases(opts ...lease.Option) Option {
	return func(c *config) { c.leased, c.leases = true, append(c.leases, opts...) }
}

// WithDenyCache sets how many denials the deny cache remembers (default
// DefaultDenyCache); 0 turns the deny cache off, and a negative n is an
// error. See package denycache for what it answers locally.
func WithDenyCache(n int) Option {
	return func(c *config) { c.denyCache = n }
}

// WithFallback passes options to the failure policy of every front
// (fallback.New): the policy, the deadline, the breaker's settings, the
// number of replicas for LocalFallback. Options given to NewFront follow
// these, so they win where both set the same thing. Several calls add up.
func WithFallback(opts ...fallback.Option) Option {
	return func(c *config) { c.fallback = append(c.fallback, opts...) }
}

// WithSlotGroups replaces the breaker per primary that each front keeps on
// a Redis Cluster client with n breakers for fixed groups of slots: the
// 16384 hash slots split into n groups of consecutive slots. Groups do not
// follow the primaries (a group can straddle two, and a failover moves
// slots), so a failing primary degrades every key of the groups it holds
// part of; use it where CLUSTER SLOTS cannot be read. n must be between 1
// and 16384. A client that is not a Cluster client (standalone, Sentinel,
// a go-redis Ring) has one breaker per front in any case: its keys do not
// live in slots.
func WithSlotGroups(n int) Option {
	return func(c *config) { c.slotGroups, c.groupsSet = n, true }
}

// WithTopologyRefresh sets how old the Cluster slot map behind the
// breaker per primary may get before a check starts reading it again
// (CLUSTER SLOTS, on a goroutine of its own; default
// DefaultTopologyRefresh). After a failover, keys of the moved slots are
// decided by the promoted primary, with a fresh breaker, within about this
// interval of the cluster's own map showing the move. d must be > 0.
func WithTopologyRefresh(d time.Duration) Option {
	return func(c *config) { c.refresh = d }
}

// front is how a Stack embeds its default Front without exporting it.
type front = Front

// Stack is the recommended Redis store, assembled: a script store, leases
// (when turned on), a deny cache (unless turned off) and a default front,
// the failure policy. It is a ratewarden.Store deciding through the
// default front, whose methods it has (State, States and Primaries too).
// Make one with New or NewGoRedis; it is safe for concurrent use.
type Stack struct {
	*front
	script *redisstore.Store
	leases *lease.Store     // nil: no lease mode
	deny   *denycache.Store // nil: no deny cache
	shared ratewarden.Store // what every front wraps: the top of the above
	groups int              // breakers per front; 1 off a Cluster
	topo   *topology        // breakers per primary, on a Cluster without WithSlotGroups
	opts   []fallback.Option
}

// New returns the stack on client, a standalone, Sentinel or Cluster
// rueidis client created with DisableCache: true (see redisstore.New).
func New(client rueidis.Client, opts ...Option) (*Stack, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if nilcheck.Is(client) {
		return nil, fmt.Errorf("stack: client must not be nil%s: %w", nilcheck.Describe(client), ratewarden.ErrInvalidConfig)
	}
	script, err := redisstore.New(client, c.redis...)
	if err != nil {
		return nil, err
	}
	var topo slotMap
	if client.Mode() == rueidis.ClientModeCluster {
		topo = rueidisSlots(client)
	}
	return assemble(script, topo, c)
}

// NewGoRedis returns the stack on an existing go-redis v9 client (see
// redisstore.NewGoRedis; create it with ContextTimeoutEnabled: true so the
// failure policy's deadline bounds every call). A *redis.ClusterClient
// gets a breaker per group of slots.
func NewGoRedis(client redis.UniversalClient, opts ...Option) (*Stack, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if nilcheck.Is(client) {
		return nil, fmt.Errorf("stack: client must not be nil%s: %w", nilcheck.Describe(client), ratewarden.ErrInvalidConfig)
	}
	script, err := redisstore.NewGoRedis(client, c.redis...)
	if err != nil {
		return nil, err
	}
	var topo slotMap
	if cc, ok := client.(*redis.ClusterClient); ok {
		topo = goRedisSlots(cc)
	}
	return assemble(script, topo, c)
}

// newConfig applies opts to the defaults and validates the result.
func newConfig(opts []Option) (config, error) {
	c := config{denyCache: DefaultDenyCache, slotGroups: DefaultSlotGroups, refresh: DefaultTopologyRefresh}
	for i, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("stack: option %d is nil: %w", i, ratewarden.ErrInvalidConfig)
		}
		o(&c)
	}
	if err := c.validate(); err != nil {
		return config{}, err
	}
	return c, nil
}

// validate reports the first setting out of its range, by name. The
// options passed on to the layers (WithRedis, WithLeases, WithFallback)
// are validated by the layers' own constructors.
func (c *config) validate() error {
	var detail string
	switch {
	case c.denyCache < 0:
		detail = fmt.Sprintf("deny cache size must be >= 0 (0 turns it off), got %d", c.denyCache)
	case c.refresh <= 0:
		detail = fmt.Sprintf("topology refresh must be > 0, got %v", c.refresh)
	case c.slotGroups < 1 || c.slotGroups > slots:
		detail = fmt.Sprintf("slot groups must be between 1 and %d, got %d", slots, c.slotGroups)
	default:
		return nil
	}
	return fmt.Errorf("stack: %s: %w", detail, ratewarden.ErrInvalidConfig)
}

// assemble builds the layers over script, bottom up; topo reads the slot
// map of a Cluster client (nil for any other client).
func assemble(script *redisstore.Store, topo slotMap, c config) (*Stack, error) {
	s := &Stack{script: script, shared: script, groups: 1, opts: c.fallback}
	switch {
	case topo != nil && c.groupsSet:
		s.groups = c.slotGroups
	case topo != nil:
		s.groups = maxPrimaries
		s.topo = newTopology(topo, c.refresh, DefaultSlotGroups)
	}
	if c.leased {
		l, err := lease.New(script, c.leases...)
		if err != nil {
			return nil, err
		}
		s.leases, s.shared = l, l
	}
	if c.denyCache > 0 {
		d, err := denycache.New(s.shared, denycache.WithMaxEntries(c.denyCache))
		if err != nil {
			return nil, err
		}
		s.deny, s.shared = d, d
	}
	front, err := s.NewFront()
	if err != nil {
		return nil, err
	}
	s.front = front
	return s, nil
}

// NewFront returns another failure policy over the Stack's script store
// and deny cache, configured by the Stack's WithFallback options followed
// by opts; it has breakers of its own (one per slot group on a Cluster
// client) and a local store of its own for LocalFallback. A service that
// lets each limit choose its failure policy makes one front per policy.
func (s *Stack) NewFront(opts ...fallback.Option) (*Front, error) {
	all := append(s.opts[:len(s.opts):len(s.opts)], opts...)
	if s.groups == 1 {
		st, err := fallback.New(s.shared, all...)
		if err != nil {
			return nil, err
		}
		return &Front{policy: st, one: st}, nil
	}
	groups := s.groups
	partition := func(key string) int { return redisstore.Slot(key) * groups / slots }
	if s.topo != nil {
		partition = s.topo.partition
	}
	st, err := fallback.NewPartitioned(s.shared, groups, partition, all...)
	if err != nil {
		return nil, err
	}
	return &Front{policy: st, part: st, topo: s.topo}, nil
}

// Script returns the script store at the bottom of the stack, for
// redisstore's own methods (Store.Key). Checks made on it directly pass
// neither the deny cache nor a failure policy.
func (s *Stack) Script() *redisstore.Store { return s.script }

// DenyCache returns the deny cache, or nil when WithDenyCache(0) turned it
// off.
func (s *Stack) DenyCache() *denycache.Store { return s.deny }

// Leases returns the lease layer, or nil without WithLeases.
func (s *Stack) Leases() *lease.Store { return s.leases }

// Close releases what the Stack holds in Redis: with WithLeases, it gives
// the unused units of fixed-window leases back (see lease.Store.Close), and
// later checks are plain. Without leases it does nothing. Call it before
// closing the client; it does not close the client.
func (s *Stack) Close(ctx context.Context) error {
	if s.leases == nil {
		return nil
	}
	return s.leases.Close(ctx)
}

// policy is the failure policy a Front embeds: its *fallback.Store, or its
// *fallback.Partitioned on a Cluster.
type policy = ratewarden.Store

// Front is one failure policy over a Stack's shared layers: a
// ratewarden.Store with a deadline, circuit breakers and a failure policy
// of its own, whose methods are those of fallback.Store (see Check,
// Reset, Charge, Acquire, Release and Extend there). Make one with
// Stack.NewFront.
type Front struct {
	policy
	one  *fallback.Store       // one breaker, or
	part *fallback.Partitioned // one per primary or group of slots (Cluster)
	topo *topology             // with a breaker per primary
}

// State returns the front's breaker state; on a Cluster, the worst of the
// breakers of the primaries that own slots now, or of the slot groups
// (fallback.StateOpen if any is open). A readiness check can report not
// ready while it is fallback.StateOpen.
func (f *Front) State() fallback.State {
	worst := fallback.StateClosed
	for _, st := range f.States() {
		worst = max(worst, st)
	}
	return worst
}

// States returns the state of each of the front's breakers: one; on a
// Cluster, one per primary that owns slots now, in the order the front
// first saw them, or one per slot group in slot order (WithSlotGroups).
func (f *Front) States() []fallback.State {
	switch {
	case f.topo != nil:
		all := f.part.States()
		var out []fallback.State
		for _, n := range f.topo.live() {
			out = append(out, all[n])
		}
		return out
	case f.part != nil:
		return f.part.States()
	}
	return []fallback.State{f.one.State()}
}

// Primaries returns, on a Cluster with a breaker per primary, the state of
// the breaker of each primary that owns slots now, by its address as
// CLUSTER SLOTS gives it; nil otherwise.
func (f *Front) Primaries() map[string]fallback.State {
	if f.topo == nil {
		return nil
	}
	all := f.part.States()
	out := map[string]fallback.State{}
	for n, addr := range f.topo.primaries() {
		out[addr] = all[n]
	}
	return out
}

var (
	_ ratewarden.Store = (*Stack)(nil)
	_ ratewarden.Store = (*Front)(nil)
)
