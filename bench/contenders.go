package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/denycache"
	"github.com/ratewarden/ratewarden/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// Limit is what every contender enforces: Rate requests per Period.
type Limit struct {
	Rate   int64
	Period time.Duration
}

// Instance is one replica's limiter with its own Redis client.
type Instance interface {
	// Allow decides one request for key and reports whether it passed.
	Allow(ctx context.Context, key string) (bool, error)
	Close()
}

// Contender makes instances of one limiter.
type Contender struct {
	Name string
	// Open makes an instance on addr for callers concurrent goroutines.
	Open func(addr string, callers int, lim Limit) (Instance, error)
}

// Contender names, as printed.
const (
	RWSliding          = "ratewarden sliding_window"
	RWSlidingNoCache   = "ratewarden sliding_window, no deny cache"
	RWSlidingUnbatched = "ratewarden sliding_window, plain (no batching, no deny cache)"
	RWSlidingEvalsha   = "ratewarden sliding_window, EVALSHA (WithFunctions(false))"
	RWToken            = "ratewarden token_bucket"
	RWTokenUnbatched   = "ratewarden token_bucket, plain (no batching, no deny cache)"
	RedisRate          = "go-redis/redis_rate v10 (GCRA)"
	Ulule              = "ulule/limiter v3 (redis store)"
	Bare               = "bare INCR+PEXPIRE script (rueidis)"
)

// Contenders returns every contender in a fixed order.
func Contenders() []Contender {
	return []Contender{
		{RWSliding, openRatewarden(ratewarden.SlidingWindow, withDenyCache)},
		{RWSlidingNoCache, openRatewarden(ratewarden.SlidingWindow, noDenyCache)},
		{RWSlidingUnbatched, openRatewarden(ratewarden.SlidingWindow, noDenyCache, redisstore.WithBatching(false))},
		{RWSlidingEvalsha, openRatewarden(ratewarden.SlidingWindow, withDenyCache, redisstore.WithFunctions(false))},
		{RWToken, openRatewarden(ratewarden.TokenBucket, withDenyCache)},
		{RWTokenUnbatched, openRatewarden(ratewarden.TokenBucket, noDenyCache, redisstore.WithBatching(false))},
		{RedisRate, openRedisRate},
		{Ulule, openUlule},
		{Bare, openBare},
	}
}

func newRueidis(addr string) (rueidis.Client, error) {
	return rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
}

// newGoRedis gives go-redis a pool as large as the number of callers, so
// no caller waits for a connection.
func newGoRedis(addr string, callers int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: max(callers, 10), MaxRetries: -1})
}

type rwInstance struct {
	c   rueidis.Client
	l   *ratewarden.Limiter
	lim ratewarden.Limit
}

// Whether a ratewarden contender puts a deny cache in front of its script
// store.
const (
	withDenyCache = true
	noDenyCache   = false
)

// openRatewarden opens ratewarden on a script store with redisstore's
// defaults (batching on) changed by opts, behind a deny cache with its
// default size when cached is set. There is no failure policy: the
// contenders compare deciding, not outage handling (the figures measured
// before package stack existed are of these same compositions).
func openRatewarden(alg ratewarden.Algorithm, cached bool, opts ...redisstore.Option) func(string, int, Limit) (Instance, error) {
	return func(addr string, _ int, lim Limit) (Instance, error) {
		c, err := newRueidis(addr)
		if err != nil {
			return nil, err
		}
		var s ratewarden.Store
		s, err = redisstore.New(c, opts...)
		if err == nil && cached {
			s, err = denycache.New(s)
		}
		if err != nil {
			c.Close()
			return nil, err
		}
		l, err := ratewarden.New(s)
		if err != nil {
			c.Close()
			return nil, err
		}
		rl := ratewarden.Limit{Algorithm: alg, Rate: lim.Rate, Period: lim.Period}
		if err := rl.Validate(); err != nil {
			c.Close()
			return nil, err
		}
		return &rwInstance{c: c, l: l, lim: rl}, nil
	}
}

func (i *rwInstance) Allow(ctx context.Context, key string) (bool, error) {
	r, err := i.l.Allow(ctx, key, i.lim)
	return r.Allowed, err
}

func (i *rwInstance) Close() { i.c.Close() }

type redisRateInstance struct {
	c   *redis.Client
	l   *redis_rate.Limiter
	lim redis_rate.Limit
}

func openRedisRate(addr string, callers int, lim Limit) (Instance, error) {
	c := newGoRedis(addr, callers)
	return &redisRateInstance{c: c, l: redis_rate.NewLimiter(c),
		lim: redis_rate.Limit{Rate: int(lim.Rate), Burst: int(lim.Rate), Period: lim.Period}}, nil
}

func (i *redisRateInstance) Allow(ctx context.Context, key string) (bool, error) {
	r, err := i.l.Allow(ctx, key, i.lim)
	if err != nil {
		return false, err
	}
	return r.Allowed > 0, nil
}

func (i *redisRateInstance) Close() { _ = i.c.Close() }

type ululeInstance struct {
	c *redis.Client
	l *limiter.Limiter
}

func openUlule(addr string, callers int, lim Limit) (Instance, error) {
	c := newGoRedis(addr, callers)
	st, err := ulredis.NewStoreWithOptions(c, limiter.StoreOptions{Prefix: "ulule"})
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("ulule store: %w", err)
	}
	return &ululeInstance{c: c, l: limiter.New(st, limiter.Rate{Period: lim.Period, Limit: lim.Rate})}, nil
}

func (i *ululeInstance) Allow(ctx context.Context, key string) (bool, error) {
	r, err := i.l.Get(ctx, key)
	if err != nil {
		return false, err
	}
	return !r.Reached, nil
}

func (i *ululeInstance) Close() { _ = i.c.Close() }

// bareScript is the least a Redis rate limiter can do per request: count
// in a fixed window that starts at the first request, and set its expiry.
const bareScript = `local c = redis.call('INCR', KEYS[1])
if c == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return c`

type bareInstance struct {
	c    rueidis.Client
	lua  *rueidis.Lua
	rate int64
	args []string
}

func openBare(addr string, _ int, lim Limit) (Instance, error) {
	c, err := newRueidis(addr)
	if err != nil {
		return nil, err
	}
	return &bareInstance{c: c, lua: rueidis.NewLuaScript(bareScript), rate: lim.Rate,
		args: []string{strconv.FormatInt(lim.Period.Milliseconds(), 10)}}, nil
}

func (i *bareInstance) Allow(ctx context.Context, key string) (bool, error) {
	n, err := i.lua.Exec(ctx, i.c, []string{"bare:" + key}, i.args).AsInt64()
	if err != nil {
		return false, err
	}
	return n <= i.rate, nil
}

func (i *bareInstance) Close() { i.c.Close() }
