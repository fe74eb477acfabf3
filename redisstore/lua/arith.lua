-- Exact integer arithmetic in the doubles of Redis' Lua. Integers below
-- 2^53 add, subtract and compare exactly; muldiv covers the products that
-- can go beyond (internal/algo bounds every stored quantity below 2^53).
-- This part needs nothing from the clock.

local ceil, fmod, format = math.ceil, math.fmod, string.format

-- int formats an integral number in full (tostring keeps 14 digits only).
local function int(x) return format('%d', x) end

-- ms_at is the PXAT argument for an instant in µs: in ms, rounded up, so a
-- key never expires before the instant its state is good for. The window
-- ends every key of a period shares are remembered: a function library
-- keeps them from one call to the next (script.go), up to 512 of them,
-- then starts over; a script run with EVALSHA starts empty.
local msats, nmsats = {}, 0
local function ms_at(us)
  local s = msats[us]
  if s then return s end
  s = format('%d', ceil(us / 1000))
  if nmsats >= 512 then msats, nmsats = {}, 0 end
  msats[us], nmsats = s, nmsats + 1
  return s
end

-- decimal is int remembering the integers below 10^4 it formatted (the
-- counts a window's compact state holds: state.lua).
local decimals = {}
local function decimal(x)
  local s = decimals[x]
  if s then return s end
  s = format('%d', x)
  if x >= 0 and x < 10000 then decimals[x] = s end
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
