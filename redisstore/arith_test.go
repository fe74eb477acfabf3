package redisstore

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden/internal/algo"
	"github.com/ratewarden/ratewarden/internal/testredis"
)

// muldivLua runs arith.lua's muldiv over ARGV triples and returns q and r
// of each as decimal strings (Lua numbers lose digits in integer replies
// only beyond 2^63, but strings keep the test free of that question).
// arith.lua needs nothing from the clock, so no clock comes before it.
const muldivLua = "%s" + `
local out = {}
for i = 1, #ARGV, 3 do
  local q, r = muldiv(tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]))
  out[#out + 1] = string.format('%%d', q)
  out[#out + 1] = string.format('%%d', r)
end
return out
`

// TestMulDivLua holds the script's muldiv to algo.MulDiv (math/bits) on
// products far beyond 2^53, at the edges of both paths, and on random
// operands across the range the algorithms use.
func TestMulDivLua(t *testing.T) {
	srv := testredis.Start(t)
	c := newClient(t, srv.Addr)
	const two53 = int64(1) << 53
	type triple struct{ a, b, c int64 }
	cases := []triple{
		{0, 0, 1}, {1, 1, 1}, {two53 - 1, 1, 1}, {two53 - 1, two53 - 1, two53 - 1},
		{1 << 26, 1 << 26, 3}, {(1 << 26) + 1, 1 << 26, 7}, // around 2^52, the fast path's edge
		{1 << 52, 1, 3}, {(1 << 52) - 1, 1, 3},
		{650_319, 86_400_000_000 - 19_133_000_000, 86_400_000_000},
		{1_000_000_000_000, 31_622_400_000_000, 31_622_400_000_001},
		{999_983, 6_914_882_353, 86_400_000_000},
	}
	r := rand.New(rand.NewPCG(7, 2026))
	for range 3000 {
		// c and the quotient below 2^53, as the algorithms guarantee.
		cc := 1 + r.Int64N(two53-1)
		a := r.Int64N(two53)
		switch r.IntN(3) {
		case 0:
			a = r.Int64N(min(cc, 1_000_000_000_000) + 1)
		case 1:
			a = r.Int64N(1 << uint(r.IntN(53)))
		}
		b := r.Int64N(two53)
		if a > 0 {
			// b <= c × (2^53 − 1) / a keeps the quotient below 2^53.
			bound := new(big.Int).Mul(big.NewInt(cc), big.NewInt(two53-1))
			bound.Quo(bound, big.NewInt(a))
			if bound.IsInt64() && bound.Int64() < two53 {
				b = r.Int64N(bound.Int64() + 1)
			}
		}
		cases = append(cases, triple{a, b, cc})
	}
	script := rueidis.NewLuaScript(fmt.Sprintf(muldivLua, arithLua))
	const chunk = 300
	for i := 0; i < len(cases); i += chunk {
		part := cases[i:min(i+chunk, len(cases))]
		args := make([]string, 0, 3*len(part))
		for _, x := range part {
			args = append(args, strconv.FormatInt(x.a, 10), strconv.FormatInt(x.b, 10), strconv.FormatInt(x.c, 10))
		}
		out, err := script.Exec(bg, c, nil, args).AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		for j, x := range part {
			wq, wr := algo.MulDiv(x.a, x.b, x.c)
			if out[2*j] != strconv.FormatInt(wq, 10) || out[2*j+1] != strconv.FormatInt(wr, 10) {
				t.Errorf("muldiv(%d, %d, %d) = %s, %s in Lua; want %d, %d", x.a, x.b, x.c, out[2*j], out[2*j+1], wq, wr)
			}
		}
	}
}
