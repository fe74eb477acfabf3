package redisstore

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden"
)

// MaxKeyLen is the longest caller key kept as is inside the hash tag;
// longer keys are hashed.
const MaxKeyLen = 256

// KeyFormat is the version of the key layout and state formats this
// package reads and writes. Format 1 (before this version) named keys
// <prefix>{<tag>}:<algorithm>:<period>; format 2 names them
// <prefix>{<tag>}<code><period>, so a replica of either version never reads
// the other's keys (docs/redis.md says what an upgrade does to counters in
// flight).
const KeyFormat = 2

// Key returns the Redis key holding the state of key under limit:
//
//	<prefix>{<tag>}<code><period>
//
// where code is one letter naming the algorithm and its state format ('s'
// sliding_window, 'f' fixed_window, 't' token_bucket, 'l' sliding_log),
// period is the period as a count and a unit (s, m, h, d: the largest that
// divides it) or a bare count of milliseconds, and tag is key itself, or "#" and the hex of the first 16 bytes of
// key's SHA-256 when key is longer than MaxKeyLen, contains '{' or '}',
// starts with '#' (so a hashed tag never equals a caller's key) or is empty
// (which the Limiter rejects anyway).
func (s *Store) Key(key string, limit ratewarden.Limit) string {
	var c call
	return s.key(&c, key, s.enc.get(limit))
}

// key builds the key in c.kb and allocates only the result.
func (s *Store) key(c *call, key string, e *limitEnc) string {
	b := append(c.kb[:0], s.prefix...)
	b = append(b, '{')
	b = appendTag(b, key)
	b = append(b, e.suffix...)
	c.kb = b
	return string(b)
}

// PermitKey returns the Redis key holding key's concurrency limit
// (Acquire), a sorted set of its permits:
//
//	<prefix>{<tag>}p
//
// with the prefix and tag of Key, so a key's permits share a Cluster slot
// with its rate limits. The code 'p' is followed by nothing, where a rate
// limit's code is followed by its period, and no algorithm takes it.
func (s *Store) PermitKey(key string) string {
	b := append([]byte(s.prefix), '{')
	b = appendTag(b, key)
	return string(append(b, "}p"...))
}

// appendTag appends the hash tag content for key.
func appendTag(b []byte, key string) []byte {
	if key != "" && len(key) <= MaxKeyLen && key[0] != '#' && !strings.ContainsAny(key, "{}") {
		return append(b, key...)
	}
	sum := sha256.Sum256([]byte(key))
	b = append(b, '#')
	return hex.AppendEncode(b, sum[:16])
}

// limitEnc is what a Limit contributes to a script call, formatted once.
type limitEnc struct {
	suffix string // "}" + code + period
	arg    string // "code rate period_us capacity" (limit in lua/algorithms.lua)
}

// encCache keeps the encodings of recently used limits, so a check formats
// no numbers. It is bounded: when full it starts over.
type encCache struct {
	mu sync.RWMutex
	m  map[ratewarden.Limit]*limitEnc
}

const encCacheSize = 1024

func (c *encCache) get(l ratewarden.Limit) *limitEnc {
	c.mu.RLock()
	e := c.m[l]
	c.mu.RUnlock()
	if e != nil {
		return e
	}
	e = &limitEnc{
		suffix: "}" + algoCode(l.Algorithm) + compactPeriod(l.Period),
		arg: wireCode(l.Algorithm) + " " + strconv.FormatInt(l.Rate, 10) + " " +
			strconv.FormatInt(l.Period.Microseconds(), 10) + " " + strconv.FormatInt(l.Capacity(), 10),
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= encCacheSize {
		c.m = make(map[ratewarden.Limit]*limitEnc)
	}
	c.m[l] = e
	c.mu.Unlock()
	return e
}

// wireCode is the digit that names an algorithm to the scripts
// (algorithm in lua/algorithms.lua): fixed by the scripts, not by the
// order of ratewarden's constants.
func wireCode(a ratewarden.Algorithm) string {
	switch a {
	case ratewarden.SlidingWindow:
		return "0"
	case ratewarden.FixedWindow:
		return "1"
	case ratewarden.TokenBucket:
		return "2"
	default:
		return "3" // SlidingLog
	}
}

// algoCode is the letter of an algorithm in a key of KeyFormat 2. A later
// change to an algorithm's state format takes a new letter, never one used
// before, never 'p' (permits, PermitKey) and never ':' (the character
// after the tag in format 1 keys).
func algoCode(a ratewarden.Algorithm) string {
	switch a {
	case ratewarden.FixedWindow:
		return "f"
	case ratewarden.TokenBucket:
		return "t"
	case ratewarden.SlidingLog:
		return "l"
	default:
		return "s"
	}
}

// compactPeriod formats a period of whole milliseconds as a count and the
// largest unit among d, h, m and s that divides it, or as a bare count of
// milliseconds: 1m, 90s, 1500.
func compactPeriod(p time.Duration) string {
	for _, u := range [...]struct {
		d    time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if p >= u.d && p%u.d == 0 {
			return strconv.FormatInt(int64(p/u.d), 10) + u.name
		}
	}
	return strconv.FormatInt(p.Milliseconds(), 10)
}
