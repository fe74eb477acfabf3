package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// The script is the clock preamble followed by the algorithms; tests swap
// the preamble for one that takes now as an argument.
var (
	//go:embed lua/clock.lua
	clockLua string
	//go:embed lua/check.lua
	checkLua string

	script = clockLua + checkLua
)

// DefaultPrefix starts every key the Store writes unless WithPrefix says
// otherwise.
const DefaultPrefix = "rw:"

// Store is a ratewarden.Store on Redis. Every Check is one execution of one
// Lua script, which decides all limits of the request atomically on Redis'
// clock. It is safe for concurrent use.
//
// The Store does not own its client: close the client after the last use of
// the Store.
type Store struct {
	ev     evaluator
	prefix string
	enc    encCache
	calls  sync.Pool // *call
}

// Option configures a Store.
type Option func(*config)

type config struct {
	prefix string
}

// WithPrefix sets the string every key starts with (default "rw:"), to
// share a Redis between applications or environments. It must not contain
// '{' or '}', which would break the Cluster hash tag around the caller's
// key.
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// New returns a Store on client, which may be a standalone, Sentinel or
// Cluster rueidis client (auto-pipelining makes concurrent checks share
// round trips). Client-side caching is not used; create the client with
// DisableCache: true.
func New(client rueidis.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("redisstore: %w: client must not be nil", ratewarden.ErrInvalidConfig)
	}
	return newStore(&rueidisEval{c: client, lua: rueidis.NewLuaScript(script)}, opts)
}

// NewGoRedis returns a Store on an existing go-redis v9 client: a
// *redis.Client, a failover (Sentinel) client, a *redis.ClusterClient or a
// *redis.Ring (all keys of one check share a hash tag, so they stay on one
// node). It behaves as New; the script runs with EVALSHA, and EVAL when
// Redis answers NOSCRIPT. go-redis applies context deadlines only when the
// client was created with ContextTimeoutEnabled: true; set it so a caller's
// deadline bounds a check.
func NewGoRedis(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("redisstore: %w: client must not be nil", ratewarden.ErrInvalidConfig)
	}
	return newStore(&goRedisEval{c: client, s: redis.NewScript(script)}, opts)
}

func newStore(ev evaluator, opts []Option) (*Store, error) {
	c := config{prefix: DefaultPrefix}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("redisstore: %w: nil Option", ratewarden.ErrInvalidConfig)
		}
		o(&c)
	}
	if strings.ContainsAny(c.prefix, "{}") {
		return nil, fmt.Errorf("redisstore: %w: prefix %q must not contain '{' or '}' (they would break the key's hash tag)", ratewarden.ErrInvalidConfig, c.prefix)
	}
	s := &Store{ev: ev, prefix: c.prefix}
	s.calls.New = func() any { return new(call) }
	return s, nil
}

// call holds the buffers of one script execution, pooled across checks.
type call struct {
	keys []string
	args []string
	out  []int64
	kb   []byte
}

func (c *call) reset() {
	clear(c.keys)
	clear(c.args)
	c.keys, c.args, c.out, c.kb = c.keys[:0], c.args[:0], c.out[:0], c.kb[:0]
}

// Check implements ratewarden.Store. It validates req as the Limiter does
// (bad input never reaches Redis), runs the script once, and fills res.
// Redis and network failures wrap ratewarden.ErrStoreUnavailable; when the
// caller's context ended, the error also wraps ctx.Err().
func (s *Store) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	_, err := s.check(ctx, req, res)
	return err
}

// check is Check that also returns the instant (µs, Redis TIME) the script
// decided at.
func (s *Store) check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) (int64, error) {
	if err := ratewarden.ValidateRequest(req); err != nil {
		return 0, fmt.Errorf("redisstore: %w", err)
	}
	if len(res) != len(req.Limits) {
		return 0, fmt.Errorf("redisstore: %w: res has %d elements for %d limits", ratewarden.ErrInvalidConfig, len(res), len(req.Limits))
	}
	if err := ctx.Err(); err != nil {
		return 0, unavailable(ctx, "eval", err)
	}
	c := s.calls.Get().(*call)
	defer s.calls.Put(c)
	c.reset()
	s.appendCheck(c, req)
	out, err := s.ev.eval(ctx, c.keys, c.args, c.out)
	c.out = out[:0]
	if err != nil {
		return 0, unavailable(ctx, "eval "+req.Limits[0].Scope(), err)
	}
	if len(out) != 1+4*len(req.Limits) {
		return 0, fmt.Errorf("redisstore: eval: %w: reply has %d integers, want %d", ratewarden.ErrStoreUnavailable, len(out), 1+4*len(req.Limits))
	}
	for i, lim := range req.Limits {
		r := out[1+4*i:]
		res[i] = ratewarden.Result{
			Allowed:    r[0] == 1,
			Limit:      lim,
			Remaining:  r[1],
			RetryAfter: time.Duration(r[2]) * time.Microsecond,
			ResetAfter: time.Duration(r[3]) * time.Microsecond,
		}
	}
	return out[0], nil
}

// Reset implements ratewarden.Store: one DEL of key's state under limits.
func (s *Store) Reset(ctx context.Context, key string, limits ...ratewarden.Limit) error {
	if err := ratewarden.ValidateRequest(&ratewarden.Request{Key: key, Limits: limits}); err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return unavailable(ctx, "reset", err)
	}
	c := s.calls.Get().(*call)
	defer s.calls.Put(c)
	c.reset()
	for _, lim := range limits {
		c.keys = append(c.keys, s.key(c, key, s.enc.get(lim)))
	}
	if err := s.ev.del(ctx, c.keys); err != nil {
		return unavailable(ctx, "reset", err)
	}
	return nil
}

// appendCheck adds req to the script's KEYS and ARGV (layout in
// lua/check.lua).
func (s *Store) appendCheck(c *call, req *ratewarden.Request) {
	peek := "0"
	if req.Peek {
		peek = "1"
	}
	c.args = append(c.args, strconv.FormatInt(req.Cost, 10), peek, strconv.Itoa(len(req.Limits)))
	for _, lim := range req.Limits {
		e := s.enc.get(lim)
		c.keys = append(c.keys, s.key(c, req.Key, e))
		c.args = append(c.args, e.args[:]...)
	}
}

// unavailable wraps a backend error with ErrStoreUnavailable and, when the
// caller's context is done, with its error too.
func unavailable(ctx context.Context, op string, err error) error {
	cerr := ctx.Err()
	if d, ok := ctx.Deadline(); ok && cerr == nil && !time.Now().Before(d) {
		// A client that puts the deadline on the socket (go-redis) can
		// report its i/o timeout a moment before the context's own timer.
		cerr = context.DeadlineExceeded
	}
	if cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("redisstore: %s: %w: %w (%v)", op, ratewarden.ErrStoreUnavailable, cerr, err)
	}
	return fmt.Errorf("redisstore: %s: %w: %w", op, ratewarden.ErrStoreUnavailable, err)
}

var _ ratewarden.Store = (*Store)(nil)
