package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/nilcheck"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
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
	ev      evaluator
	bat     *batcher // nil: every check is its own script call
	prefix  string
	timeout time.Duration // for callers whose context has no deadline
	charge  lazyScript
	permits lazyScript
	enc     encCache
	calls   sync.Pool // *call
}

// Option configures a Store. Options only record their value; New and
// NewGoRedis validate the collected configuration and fail with an error
// wrapping ratewarden.ErrInvalidConfig that names the setting. When an
// option is given twice, the last one counts.
type Option func(*config)

type config struct {
	functions  bool
	ack        replicaAck
	timeout    time.Duration
	prefix     string
	batching   bool
	batchSize  int
	batchLanes int
	goRedis    bool // the Store is NewGoRedis's, which sends no WAIT
}

// newConfig applies opts to the defaults and validates the result, for a
// Store of NewGoRedis when goRedis is true and of New otherwise.
func newConfig(opts []Option, goRedis bool) (config, error) {
	c := config{timeout: DefaultTimeout, prefix: DefaultPrefix, batching: true, batchSize: DefaultBatchSize, batchLanes: DefaultBatchLanes, functions: true, goRedis: goRedis}
	for i, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("redisstore: option %d is nil: %w", i, ratewarden.ErrInvalidConfig)
		}
		o(&c)
	}
	if err := c.validate(); err != nil {
		return config{}, err
	}
	return c, nil
}

// validate reports the first setting out of its range, by name.
func (c *config) validate() error {
	var detail string
	switch {
	case strings.ContainsAny(c.prefix, "{}"):
		detail = fmt.Sprintf("prefix %q must not contain '{' or '}' (they would break the key's hash tag)", c.prefix)
	case c.batchSize < 1:
		detail = fmt.Sprintf("batch size must be at least 1, got %d", c.batchSize)
	case c.batchLanes < 1:
		detail = fmt.Sprintf("batch lanes must be at least 1, got %d", c.batchLanes)
	case c.timeout <= 0:
		detail = fmt.Sprintf("timeout must be > 0, got %v", c.timeout)
	case c.ack.replicas < 0 || c.ack.replicas > 0 && c.ack.timeout < time.Millisecond:
		detail = fmt.Sprintf("replica ack needs replicas >= 0 and a timeout >= 1ms, got %d and %v", c.ack.replicas, c.ack.timeout)
	case c.ack.replicas > 0 && c.goRedis:
		detail = "WithReplicaAck needs a rueidis client (New)"
	default:
		return nil
	}
	return fmt.Errorf("redisstore: %s: %w", detail, ratewarden.ErrInvalidConfig)
}

// evalConfig is what New builds the rueidis evaluator with.
func (c *config) evalConfig() evalConfig {
	ec := evalConfig{lanes: c.batchLanes, functions: c.functions}
	if c.ack.replicas > 0 {
		ack := c.ack
		ec.ack = &ack
	}
	return ec
}

// WithPrefix sets the string every key starts with (default "rw:"), to
// share a Redis between applications or environments. It must not contain
// '{' or '}', which would break the Cluster hash tag around the caller's
// key.
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// DefaultTimeout bounds a call whose context has no deadline.
const DefaultTimeout = time.Second

// WithTimeout sets how long a call whose context has no deadline may take
// (default DefaultTimeout); d must be > 0. A deadline on the caller's
// context, earlier or later, is used as it is. Without this bound a caller
// with context.Background() would wait for the client's own write timeout
// (rueidis: 10s) on a stalled Redis. A call returns as soon as its context
// ends in any case, with the context's error.
func WithTimeout(d time.Duration) Option {
	return func(c *config) { c.timeout = d }
}

// WithReplicaAck makes every script call wait until at least replicas
// replicas of the primary have its writes, for up to timeout (Redis WAIT,
// sent on the same connection right after the script, in the same round
// trip). A check is then answered only once its consumption would survive
// the primary's loss and a failover to one of those replicas; when fewer
// replicas confirm within timeout, Check fails with an error wrapping
// ratewarden.ErrStoreUnavailable (the units stay counted on the primary),
// and a failure policy answers. It costs a replication round trip per
// script call; docs/redis.md has the measured price and loss. It needs a
// rueidis client (New): replicas must be >= 1 and timeout >= 1ms, and
// replicas 0 turns it off (the default).
func WithReplicaAck(replicas int, timeout time.Duration) Option {
	return func(c *config) { c.ack = replicaAck{replicas: int64(replicas), timeout: timeout} }
}

// WithFunctions runs the scripts as Redis functions (FUNCTION LOAD, then
// FCALL) instead of with EVALSHA, on Redis 7 and later (default on; off
// sends every script with EVALSHA, and EVAL on NOSCRIPT).
// An EVALSHA runs the whole script text, whose shared parts make some
// thirty Lua closures on every call; a function library makes them once,
// when it is loaded, which takes most of the instructions Redis runs per
// script call away (a lone check: 144k instructions with EVALSHA, 53k as a
// function; docs/performance.md). The Store loads its library (named
// ratewarden_ and a hash of its code, so versions never mix) when Redis
// answers that the function is missing, after a restart or a FUNCTION
// FLUSH too; like any library it is kept in snapshots and
// reaches replicas. A Redis without functions (6.2), or an ACL that
// refuses FCALL or FUNCTION LOAD to the client's user, makes the Store
// fall back to EVALSHA. A function that may write is refused as a whole
// by a Redis out of memory or read-only, where a script is refused at its
// first write: with this option such a Redis fails checks that would
// have been denials too. rueidis clients only (New); on a Cluster the
// library is loaded on every node when one answers that the function is
// missing.
func WithFunctions(on bool) Option {
	return func(c *config) { c.functions = on }
}

// WithBatching turns micro-batching on (the default) or off. With it on,
// checks that arrive while WithBatchLanes script calls are already in
// flight queue and go out together as one script call (each check still
// atomic, with its own result); a check that finds a free lane goes out at
// once, so batching adds no delay at low load. Off, every check is its own
// script call. Cluster clients never batch (see the package doc).
func WithBatching(on bool) Option {
	return func(c *config) { c.batching = on }
}

// WithBatchSize sets the most checks one script call carries (default
// DefaultBatchSize, 64). It must be at least 1.
func WithBatchSize(n int) Option {
	return func(c *config) { c.batchSize = n }
}

// WithBatchLanes sets how many script calls may be in flight at once
// before checks start to queue for a batch (default DefaultBatchLanes, 2).
// It must be at least 1. More lanes mean smaller batches: more Redis CPU
// per check, less waiting.
func WithBatchLanes(n int) Option {
	return func(c *config) { c.batchLanes = n }
}

// New returns a Store on client, which may be a standalone, Sentinel or
// Cluster rueidis client (auto-pipelining makes concurrent checks share
// round trips). Client-side caching is not used; create the client with
// DisableCache: true.
func New(client rueidis.Client, opts ...Option) (*Store, error) {
	if nilcheck.Is(client) {
		return nil, fmt.Errorf("redisstore: client must not be nil%s: %w", nilcheck.Describe(client), ratewarden.ErrInvalidConfig)
	}
	c, err := newConfig(opts, false)
	if err != nil {
		return nil, err
	}
	return newStore(newRueidisEval(client, script, c.evalConfig()), client.Mode() == rueidis.ClientModeCluster, &c), nil
}

// NewGoRedis returns a Store on an existing go-redis v9 client: a
// *redis.Client, a failover (Sentinel) client, a *redis.ClusterClient or a
// *redis.Ring (all keys of one check share a hash tag, so they stay on one
// node). It behaves as New; the script runs with EVALSHA, and EVAL when
// Redis answers NOSCRIPT. go-redis applies context deadlines only when the
// client was created with ContextTimeoutEnabled: true; set it so a caller's
// deadline bounds a check.
func NewGoRedis(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if nilcheck.Is(client) {
		return nil, fmt.Errorf("redisstore: client must not be nil%s: %w", nilcheck.Describe(client), ratewarden.ErrInvalidConfig)
	}
	c, err := newConfig(opts, true)
	if err != nil {
		return nil, err
	}
	return newStore(&goRedisEval{c: client, s: redis.NewScript(script)}, isGoRedisSharded(client), &c), nil
}

// isGoRedisSharded reports whether c spreads keys over several nodes.
func isGoRedisSharded(c redis.UniversalClient) bool {
	switch c.(type) {
	case *redis.ClusterClient, *redis.Ring:
		return true
	}
	return false
}

// newStore returns a Store deciding with ev, on a client that spreads
// keys over several nodes when sharded, as c (validated) says.
func newStore(ev evaluator, sharded bool, c *config) *Store {
	s := &Store{ev: ev, prefix: c.prefix, timeout: c.timeout}
	s.calls.New = func() any { return &call{callState: callState{done: make(chan struct{}, 1)}} }
	if c.batching && !sharded {
		s.bat = newBatcher(ev, &s.calls, c.batchSize, c.batchLanes)
	}
	return s
}

// call holds the buffers of one check's script execution, pooled across
// checks, and what the batcher needs while the check is queued.
type call struct {
	keys []string
	args []string
	out  []int64
	kb   []byte
	callState
}

func (c *call) reset() {
	clear(c.keys)
	clear(c.args)
	c.keys, c.args, c.out, c.kb = c.keys[:0], c.args[:0], c.out[:0], c.kb[:0]
	c.ctx, c.err = nil, nil
}

// Check implements ratewarden.Store: one script execution decides req
// (batched with concurrent checks, see the package doc) and fills res.
// req must be valid and res must have len(req.Limits) elements, as the
// ratewarden.Limiter guarantees; the Store does not check again. Redis and
// network failures wrap ratewarden.ErrStoreUnavailable; when the caller's
// context ended, the error also wraps ctx.Err().
func (s *Store) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	_, err := s.check(ctx, req, res)
	return err
}

// check is Check that also returns the instant (µs, Redis TIME) the script
// decided at.
func (s *Store) check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, unavailable(ctx, "eval", err)
	}
	ctx, b := s.bounded(ctx)
	defer b.release()
	c := s.calls.Get().(*call)
	c.reset()
	s.appendCheck(c, req)
	var err error
	if s.bat != nil {
		var owned bool
		if owned, err = s.bat.do(ctx, c); !owned {
			// The batcher frees c: the check may still be in flight.
			return 0, unavailable(ctx, "eval "+req.Limits[0].Scope(), err)
		}
	} else {
		c.out, err = s.ev.eval(ctx, c.keys, c.args, c.out[:0])
	}
	defer s.calls.Put(c)
	out := c.out
	if err != nil {
		return 0, unavailable(ctx, "eval "+req.Limits[0].Scope(), err)
	}
	if len(out) != 1+4*len(req.Limits) {
		return 0, fmt.Errorf("redisstore: eval: reply has %d integers, want %d: %w", len(out), 1+4*len(req.Limits), ratewarden.ErrStoreUnavailable)
	}
	if out[1] == -1 {
		// The key stays out of the error, which may reach logs and metrics.
		return 0, fmt.Errorf("redisstore: eval %s: %s: %w", req.Limits[0].Scope(), keyStateDetail, ratewarden.ErrKeyState)
	}
	for i, lim := range req.Limits {
		res[i] = checkResult(out[1+4*i:], lim)
	}
	return out[0], nil
}

// Reset implements ratewarden.Store: one DEL of key's state under limits.
// key and limits must be valid, as the ratewarden.Limiter guarantees.
func (s *Store) Reset(ctx context.Context, key string, limits ...ratewarden.Limit) error {
	if err := ctx.Err(); err != nil {
		return unavailable(ctx, "reset", err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
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
	c.args = append(c.args, checkHead(req))
	for _, lim := range req.Limits {
		e := s.enc.get(lim)
		c.keys = append(c.keys, s.key(c, req.Key, e))
		c.args = append(c.args, e.arg)
	}
}

// bound gives ctx the Store's timeout when it has no deadline.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, b := s.bounded(ctx)
	if b == nil {
		return ctx, func() {}
	}
	return ctx, b.release
}

// bounded gives ctx the Store's timeout when it has no deadline, in a
// context that arms no timer until something waits on it (b.release
// ends it; nil when ctx has a deadline of its own).
func (s *Store) bounded(ctx context.Context) (context.Context, *boundedCtx) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, nil
	}
	b := &boundedCtx{Context: ctx, d: time.Now().Add(s.timeout)}
	return b, b
}

// boundedCtx is its parent, which has no deadline, with the deadline d.
// context.WithDeadline arms a timer at once; a call that goes out on a
// dedicated connection needs only the deadline (for the socket), so the
// timer waits for the first Done: the calls that wait on the context
// (queued checks, pipelined commands) pay for it, the others do not.
type boundedCtx struct {
	context.Context // the caller's: no deadline
	d               time.Time

	once  sync.Once
	armed atomic.Pointer[armedCtx] // set by the first Done or by release
}

// armedCtx is what a boundedCtx's first Done (or release) made.
type armedCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// released is the armedCtx of a boundedCtx released before any Done.
var released = func() *armedCtx {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return &armedCtx{ctx: ctx, cancel: cancel}
}()

func (b *boundedCtx) Deadline() (time.Time, bool) { return b.d, true }

func (b *boundedCtx) Done() <-chan struct{} {
	b.once.Do(func() {
		ctx, cancel := context.WithDeadline(b.Context, b.d)
		b.armed.Store(&armedCtx{ctx: ctx, cancel: cancel})
	})
	return b.armed.Load().ctx.Done()
}

// Value answers from the armed context once there is one, so that a
// context derived from b (context.WithCancel and the like) finds its
// cancelCtx and hooks onto it instead of watching b from a goroutine.
func (b *boundedCtx) Value(key any) any {
	if a := b.armed.Load(); a != nil {
		return a.ctx.Value(key)
	}
	return b.Context.Value(key)
}

func (b *boundedCtx) Err() error {
	if a := b.armed.Load(); a != nil {
		return a.ctx.Err()
	}
	if err := b.Context.Err(); err != nil {
		return err
	}
	if !time.Now().Before(b.d) {
		return context.DeadlineExceeded
	}
	return nil
}

// release ends b as a cancel function ends a context: its timer stops and
// Done, now or later, is closed. A nil b is a no-op.
func (b *boundedCtx) release() {
	if b == nil {
		return
	}
	b.once.Do(func() { b.armed.Store(released) })
	b.armed.Load().cancel()
}

// cancelSource is the context whose cancellation ends ctx early: the
// caller's for a boundedCtx (whose deadline is its own), ctx otherwise.
func cancelSource(ctx context.Context) context.Context {
	if b, ok := ctx.(*boundedCtx); ok {
		return b.Context
	}
	return ctx
}

// keyStateDetail says what ErrKeyState means here, without the key.
const keyStateDetail = "a key of this check holds another type or a malformed state (written by another program under the prefix? Reset repairs it)"

// refusals are the Redis error replies that say why Redis would not run a
// command: each is a store failure, named for what it is.
var refusals = []struct{ prefix, detail string }{
	{"OOM", "Redis is out of memory (maxmemory reached) and refuses writes"},
	{"READONLY", "Redis is a read-only replica (a failover in progress?)"},
	{"MISCONF", "Redis refuses writes after a failed snapshot"},
	{"BUSY", "Redis is busy running a script"},
	{"LOADING", "Redis is loading its dataset"},
	{"MASTERDOWN", "the replica lost its primary"},
	{"CLUSTERDOWN", "the cluster is down"},
	{"TRYAGAIN", "the cluster is moving the key's slot"},
	{"NOPERM", "the Redis user may not run this command"},
	{"NOAUTH", "Redis wants authentication"},
}

// refusal returns the detail of the refusal msg starts with, if any. A
// script's error carries Redis' code after a prefix of its own
// ("ERR user_script:7: OOM ..."), so the first few words are looked at.
func refusal(msg string) string {
	words := strings.Fields(msg)
	for _, w := range words[:min(len(words), 3)] {
		for _, r := range refusals {
			if w == r.prefix {
				return r.detail
			}
		}
	}
	return ""
}

// unavailable wraps a backend error with ErrStoreUnavailable and, when the
// caller's context is done, with its error too. A WRONGTYPE reply is the
// key's own trouble (ErrKeyState); the refusals above are named.
func unavailable(ctx context.Context, op string, err error) error {
	msg := err.Error()
	if strings.Contains(msg, "WRONGTYPE") || strings.Contains(msg, "ratewarden: malformed") {
		return fmt.Errorf("redisstore: %s: %s: %w", op, keyStateDetail, ratewarden.ErrKeyState)
	}
	if d := refusal(msg); d != "" {
		op += ": " + d
	}
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
