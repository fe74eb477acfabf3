package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// evaluator is the seam between the Store and a Redis client: run the
// script once, or delete keys. Both Redis clients implement it.
type evaluator interface {
	// eval runs the script with keys and args and appends the reply's
	// integers to dst.
	eval(ctx context.Context, keys, args []string, dst []int64) ([]int64, error)
	// del deletes keys in one command.
	del(ctx context.Context, keys []string) error
}

type rueidisEval struct {
	c   rueidis.Client
	lua *rueidis.Lua // EVALSHA, EVAL on NOSCRIPT
}

func (e *rueidisEval) eval(ctx context.Context, keys, args []string, dst []int64) ([]int64, error) {
	msgs, err := e.lua.Exec(ctx, e.c, keys, args).ToArray()
	if err != nil {
		return dst, err
	}
	for i := range msgs {
		v, err := msgs[i].AsInt64()
		if err != nil {
			return dst, err
		}
		dst = append(dst, v)
	}
	return dst, nil
}

func (e *rueidisEval) del(ctx context.Context, keys []string) error {
	return e.c.Do(ctx, e.c.B().Del().Key(keys...).Build()).Error()
}

type goRedisEval struct {
	c redis.UniversalClient
	s *redis.Script // Run: EVALSHA, EVAL on NOSCRIPT
}

func (e *goRedisEval) eval(ctx context.Context, keys, args []string, dst []int64) ([]int64, error) {
	a := make([]any, len(args))
	for i, s := range args {
		a[i] = s
	}
	vals, err := e.s.Run(ctx, e.c, keys, a...).Int64Slice()
	if err != nil {
		return dst, err
	}
	return append(dst, vals...), nil
}

func (e *goRedisEval) del(ctx context.Context, keys []string) error {
	return e.c.Del(ctx, keys...).Err()
}
