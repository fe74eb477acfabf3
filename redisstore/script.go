package redisstore

import _ "embed"

// The script is the clock preamble, the exact arithmetic the algorithms
// share with the lease script, and the algorithms; tests swap the preamble
// for one that takes now as an argument.
var (
	//go:embed lua/clock.lua
	clockLua string
	//go:embed lua/arith.lua
	arithLua string
	//go:embed lua/check.lua
	checkLua string

	script = clockLua + arithLua + checkLua
)
