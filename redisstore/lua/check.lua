-- The check script: decides a list of checks, one after the other, each
-- all-or-nothing over its limits.
--
-- Needs now and base (clock.lua), read_limit and token_bucket_reserve
-- (algorithms.lua) and new_state (state.lua).
--
-- ARGV, from ARGV[base], is the checks, each
--   cost, mode, m, then m limits (four arguments each, read_limit)
-- and KEYS holds one key per limit, in the same order. mode is
-- 2 * max_delay_us + peek (0|1): 0 and 1 for a plain check and a peek,
-- more for a reservation (Request.MaxDelay) of up to max_delay_us.
--
-- Reply: now, then per limit of every check
--   allowed (0|1), remaining, retry_after_us, reset_after_us
-- An admission has no retry, so a reservation admitted ahead of time
-- carries its delay (Result.Delay) in the retry_after_us of each limit.
-- A check whose keys hold another type or a malformed state has allowed -1
-- on its first limit (and zeros elsewhere): it fails alone. Any other error
-- (Redis refusing writes: OOM, READONLY, MISCONF) fails the whole call.
-- Integers only: Redis truncates Lua numbers in replies.

-- One state record per limit position, reused by every check.
local states = {new_state()}

local function state(j)
  local st = states[j]
  if not st then
    st = new_state()
    states[j] = st
  end
  return st
end

local out = {now}

-- reserve turns a denied check into a reservation when every limit is a
-- token bucket and the largest wait any of them needs (their verdicts
-- are in out from out[o + 1], their states in states) is within maxd:
-- each bucket reserves n for now + that wait (algo.TokenBucketReserve,
-- consuming unless peek). Otherwise the denial stands.
local function reserve(o, n, peek, m, ai, ki, maxd)
  local delay = 0
  for j = 1, m do
    if ARGV[ai + 4 * (j - 1)] ~= '2' then return end
    local q = o + 4 * (j - 1)
    if out[q + 1] == 0 and out[q + 3] > delay then delay = out[q + 3] end
  end
  if delay > maxd then return end
  for j = 1, m do
    local _, _, rate, P, cap = read_limit(ai + 4 * (j - 1))
    local q = o + 4 * (j - 1)
    out[q + 1], out[q + 2], out[q + 3], out[q + 4] = token_bucket_reserve(states[j], KEYS[ki + j - 1], rate, P, cap, n, delay, not peek)
  end
end

-- run decides one check: cost n, m limits from ARGV[ai] and KEYS[ki],
-- results from out[o + 1]; a reservation when maxd > 0.
local function run(o, n, peek, m, ai, ki, maxd)
  if m == 1 then
    -- One limit: its verdict is the check's, so one pass decides and
    -- consumes (consuming changes nothing when it denies).
    local st, key = states[1], KEYS[ki]
    local load, decide, rate, P, cap = read_limit(ai)
    load(st, key, P)
    out[o + 1], out[o + 2], out[o + 3], out[o + 4] = decide(st, key, rate, P, cap, n, not peek and n > 0)
    if maxd > 0 and out[o + 1] == 0 then reserve(o, n, peek, 1, ai, ki, maxd) end
    return
  end
  local ok = true
  -- Pass 1: every limit's verdict, consuming nothing.
  for j = 1, m do
    local st, key = state(j), KEYS[ki + j - 1]
    local load, decide, rate, P, cap = read_limit(ai + 4 * (j - 1))
    load(st, key, P)
    local q = o + 4 * (j - 1)
    out[q + 1], out[q + 2], out[q + 3], out[q + 4] = decide(st, key, rate, P, cap, n, false)
    if out[q + 1] == 0 then ok = false end
  end
  -- Pass 2: all admit, so consume from every limit.
  if ok and not peek and n > 0 then
    for j = 1, m do
      local _, decide, rate, P, cap = read_limit(ai + 4 * (j - 1))
      local q = o + 4 * (j - 1)
      out[q + 1], out[q + 2], out[q + 3], out[q + 4] = decide(states[j], KEYS[ki + j - 1], rate, P, cap, n, true)
    end
  elseif not ok and maxd > 0 then
    reserve(o, n, peek, m, ai, ki, maxd)
  end
end

-- key_state reports whether an error raised inside a check is about the
-- key's own state: Redis' WRONGTYPE (another type under the key) or a
-- loader's "malformed" (state.lua). Anything else (OOM, READONLY,
-- MISCONF, an unknown algorithm code) is Redis' or the caller's trouble,
-- not this key's, and fails the whole call.
local find, fmod = string.find, math.fmod
local function key_state(e)
  local msg = e
  if type(e) == 'table' then msg = e.err end
  msg = tostring(msg)
  return find(msg, 'WRONGTYPE', 1, true) ~= nil or find(msg, 'ratewarden: malformed', 1, true) ~= nil
end

local ki, ai, nargs = 1, base, #ARGV
while ai <= nargs do
  local n, mode, m = tonumber(ARGV[ai]), ARGV[ai + 1], tonumber(ARGV[ai + 2])
  local peek, maxd = mode == '1', 0
  if mode ~= '0' and not peek then
    local x = tonumber(mode)
    local b = fmod(x, 2)
    peek, maxd = b == 1, (x - b) / 2
  end
  ai = ai + 3
  local o = #out
  local ok, e = pcall(run, o, n, peek, m, ai, ki, maxd)
  if not ok then
    -- Not this key's trouble: the call fails with Redis' own error.
    if not key_state(e) then
      if type(e) == 'table' then return e end
      return redis.error_reply(tostring(e))
    end
    -- A key of this check holds another type or a malformed state. Every
    -- read comes before the check's first write, so it wrote nothing; it
    -- fails alone (allowed -1) and the other checks of a batch go on.
    for q = o + 1, o + 4 * m do out[q] = 0 end
    out[o + 1] = -1
  end
  ai, ki = ai + 4 * m, ki + m
end
return out
