-- Exact integer arithmetic in Lua's doubles, and the token bucket's state,
-- shared by check.lua and lease.lua (each script is the clock preamble,
-- this file, then its own part). Integers below 2^53 add, subtract and
-- compare exactly; muldiv covers the products that can go beyond.

local fmod, format, match, tonumber = math.fmod, string.format, string.match, tonumber

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

-- parse_tat reads a token bucket's state: "T" or "T F", the TAT
-- T + F/rate µs (algo.Bucket).
local function parse_tat(v, key)
  local t, f = match(v, '^(%d+)$'), '0'
  if not t then t, f = match(v, '^(%d+) (%d+)$') end
  if not t then error('ratewarden: malformed token bucket state at ' .. key) end
  return tonumber(t), tonumber(f)
end

-- tat_string is the inverse of parse_tat; a whole TAT is one integer.
local function tat_string(t, f)
  if f > 0 then return format('%d %d', t, f) end
  return format('%d', t)
end

-- algo.bucketUsed
local function used(t, f, rate, P)
  local q, r = muldiv(t - now, rate, P)
  r = r + f
  if r >= P then q, r = q + 1, r - P end
  if r > 0 then q = q + 1 end
  return q
end

-- algo.bucketAdvance
local function advance(t, f, n, rate, P)
  local q, r = muldiv(n, P, rate)
  f = f + r
  if f >= rate then q, f = q + 1, f - rate end
  return t + q, f
end

-- algo.bucketRetry
local function bucket_retry(t, f, rate, P, cap, n)
  local q, r = muldiv(cap - n, P, rate)
  if r < f then q = q - 1 end
  local d = t - now - q
  if d < 1 then d = 1 end
  return d
end

-- bucket_now is the stored bucket as algo.TokenBucket reads it at now: a
-- fraction from a larger rate rounds up, a TAT in the past is a full bucket.
local function bucket_now(t, f, rate)
  if f >= rate then t, f = t + 1, 0 end
  if t < now then t, f = now, 0 end
  return t, f
end
