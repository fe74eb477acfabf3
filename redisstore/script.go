package redisstore

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"strings"
)

// The scripts are assembled from the files in lua/, each of which says what
// it needs from the ones before it:
//
//	clock.lua       now (Redis TIME, µs) and base (the first own ARGV)
//	arith.lua       exact integer arithmetic in Lua's doubles
//	state.lua       the stored formats: the compatibility contract
//	algorithms.lua  the four algorithms and the limit decoder
//	decide.lua      the check script's definitions: one check
//	check.lua       the check script's own part: a list of checks
//	lease.lua       the lease script's own part: take and give back
//	charge.lua      the charge script's own part: units spent elsewhere
//
// Every part after the clock is shared text, so a test can put its own
// clock in front of the very same body (testClockLua in diff_test.go).
var (
	//go:embed lua/clock.lua
	clockLua string
	//go:embed lua/arith.lua
	arithLua string
	//go:embed lua/state.lua
	stateLua string
	//go:embed lua/algorithms.lua
	algorithmsLua string
	//go:embed lua/decide.lua
	decideLua string
	//go:embed lua/check.lua
	checkLua string
	//go:embed lua/lease.lua
	leaseLua string
	//go:embed lua/charge.lua
	chargeLua string

	// checkBody and leaseBody are the two scripts after their clock.
	checkBody  = arithLua + stateLua + algorithmsLua + decideLua + checkLua
	leaseBody  = arithLua + stateLua + algorithmsLua + leaseLua
	chargeBody = arithLua + stateLua + algorithmsLua + chargeLua

	// script decides checks (Store.Check). The lease script (Lender) is
	// clockLua + leaseBody, put together by the Store's evaluator
	// (rescript in lease.go) so that a test's evaluator can put its own
	// clock first.
	script = clockLua + checkBody
)

// On Redis 7 and later the evaluator runs each script as a function of a
// library of its own (FUNCTION LOAD, FCALL) rather than with EVALSHA.
// An EVALSHA executes the whole text: a script's shared parts are almost
// all definitions, and making their thirty-odd closures anew costs Redis
// about as much as a decision itself. A library runs its text once, when
// it is loaded; the function then runs only the clock and the script's own
// part. The library holds
//
//	local now, base, KEYS, ARGV      -- set by every call
//	local rw_run                     -- the own part, made on the first call
//	local function rw_define()       -- the shared parts, then
//	  <arith.lua ...>                --   rw_run = function() <own part> end
//	end
//	local function rw_clock() <the clock> return now, base end
//	redis.register_function('<name>', function(keys, args) ... end)
//
// so the parts read now, base, KEYS and ARGV as they do in a script (the
// clock's own locals are returned from rw_clock). The shared parts run in
// rw_define on the first call, not at load, because a library's loading
// code sees no globals but redis (7.0). What they define lives as long as
// the library: they keep nothing from one call that changes the next,
// only bounded memos of what arguments decode to (limit, head) and of
// numbers formatted for Redis (ms_at, decimal), and records every call
// writes before it reads them (decide.lua). The library's name is its
// text's hash, so every version of the scripts has its own and replicas
// of different versions never share one.

// ownParts are the scripts' own parts: what runs on every call of a
// function. A script whose text does not end with one of them runs with
// EVALSHA.
var ownParts = []*string{&checkLua, &leaseLua, &chargeLua, &permitLua}

// library returns the function library that runs script (a clock, then
// the shared parts from arith.lua on, then one of ownParts) and the name
// of its function, or ok false when script is not of that shape.
func library(script string) (code, name string, ok bool) {
	i := strings.Index(script, arithLua)
	if i < 0 {
		return "", "", false
	}
	var own string
	for _, p := range ownParts {
		if strings.HasSuffix(script, *p) && len(*p) <= len(script)-i {
			own = *p
			break
		}
	}
	if own == "" {
		return "", "", false
	}
	clock, shared := script[:i], script[i:len(script)-len(own)]
	const nameMark = "\x00name\x00"
	var b strings.Builder
	b.WriteString("#!lua name=" + nameMark + "\n")
	b.WriteString("local now, base, KEYS, ARGV\nlocal rw_run\nlocal function rw_define()\n")
	b.WriteString(shared)
	b.WriteString("\nrw_run = function()\n")
	b.WriteString(own)
	b.WriteString("\nend\nend\nlocal function rw_clock()\n")
	b.WriteString(clock)
	b.WriteString("\nreturn now, base\nend\n")
	b.WriteString("redis.register_function('" + nameMark + "', function(keys, args)\n")
	b.WriteString("  KEYS, ARGV = keys, args\n  if not rw_run then rw_define() end\n  now, base = rw_clock()\n  return rw_run()\nend)\n")
	sum := sha1.Sum([]byte(b.String()))
	name = "ratewarden_" + hex.EncodeToString(sum[:10])
	return strings.ReplaceAll(b.String(), nameMark, name), name, true
}
