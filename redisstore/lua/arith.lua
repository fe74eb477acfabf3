-- Exact integer arithmetic in the doubles of Redis' Lua. Integers below
-- 2^53 add, subtract and compare exactly; muldiv covers the products that
-- can go beyond (internal/algo bounds every stored quantity below 2^53).
-- This part needs nothing from the clock.

local ceil, fmod, format = math.ceil, math.fmod, string.format

-- int formats an integral number in full (tostring keeps 14 digits only).
local function int(x) return format('%d', x) end

-- memo keeps what a call's arguments decode to and what its common
-- numbers format to, by what they are made from: limits and check heads
-- by their argument text (limit in algorithms.lua, head in decide.lua),
-- small counts by their value (decimal) and window ends by their instant,
-- negated (ms_at). The keys cannot collide: a head has three numbers and a
-- limit four, counts are 0 to 9999 and negated instants below 0. A
-- function library keeps it from one call to the next (script.go), so it
-- starts over past 1024 entries; a script run with EVALSHA starts it
-- empty. One table, so that EVALSHA makes one.
local memo, nmemo = {}, 0
local function remember(k, v)
  if nmemo >= 1024 then memo, nmemo = {}, 0 end
  memo[k], nmemo = v, nmemo + 1
  return v
end

-- ms_at is the PXAT argument for an instant in µs (> 0): in ms, rounded
-- up, so a key never expires before the instant its state is good for.
local function ms_at(us)
  return memo[-us] or remember(-us, format('%d', ceil(us / 1000)))
end

-- decimal is int, remembered for the counts 0 to 9999 (a window's
-- compact state: state.lua).
local function decimal(x)
  local s = memo[x]
  if s then return s end
  s = format('%d', x)
  if x >= 0 and x < 10000 then remember(x, s) end
  return s
end

-- muldiv returns q, r with a * b = q * c + r and 0 <= r < c, exactly
-- (algo.MulDiv), for integers a, b >= 0 and c > 0 below 2^53 whose
-- quotient is below 2^53. fmod is exact in IEEE arithmetic, and so is the
-- division of a multiple of c by c.
local TWO52 = 4503599627370496
local function muldiv(a, b, c)
  local p = a * b
  if p < TWO52 then
    local r = fmod(p, c)
    return (p - r) / c, r
  end
  -- Long multiplication modulo c, one bit of b at a time from the top:
  -- with a = aq * c + ar, (the bits of b so far) * a = q * c + r, 0 <= r < c.
  -- Each step compares before it adds, so no sum reaches 2^53.
  local ar = fmod(a, c)
  local aq = (a - ar) / c
  local h = 1
  while h * 2 <= b do h = h * 2 end
  local q, r = 0, 0
  while h >= 1 do
    q = q * 2
    if r >= c - r then r, q = r - (c - r), q + 1 else r = r + r end
    if b >= h then
      b = b - h
      q = q + aq
      if r >= c - ar then r, q = r - (c - ar), q + 1 else r = r + ar end
    end
    h = h / 2
  end
  return q, r
end
