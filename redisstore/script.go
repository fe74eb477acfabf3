package redisstore

import _ "embed"

// The scripts are assembled from the files in lua/, each of which says what
// it needs from the ones before it:
//
//	clock.lua       now (Redis TIME, µs) and base (the first own ARGV)
//	arith.lua       exact integer arithmetic in Lua's doubles
//	state.lua       the stored formats: the compatibility contract
//	algorithms.lua  the four algorithms and the limit decoder
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
	//go:embed lua/check.lua
	checkLua string
	//go:embed lua/lease.lua
	leaseLua string
	//go:embed lua/charge.lua
	chargeLua string

	// checkBody and leaseBody are the two scripts after their clock.
	checkBody  = arithLua + stateLua + algorithmsLua + checkLua
	leaseBody  = arithLua + stateLua + algorithmsLua + leaseLua
	chargeBody = arithLua + stateLua + algorithmsLua + chargeLua

	// script decides checks (Store.Check). The lease script (Lender) is
	// clockLua + leaseBody, put together by the Store's evaluator
	// (rescript in lease.go) so that a test's evaluator can put its own
	// clock first.
	script = clockLua + checkBody
)
