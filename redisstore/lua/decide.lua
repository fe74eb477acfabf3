-- The check script's definitions: deciding one check, all-or-nothing over
-- its limits. check.lua runs them over a call's list of checks.
--
-- Needs now (clock.lua), memo and remember (arith.lua), limit and
-- token_bucket_reserve (algorithms.lua) and new_state (state.lua).
--
-- These are definitions only, so that a function library (script.go)
-- makes them once: the records below are reused by every call, and hold
-- nothing from one call that the next reads before writing it.

local find, fmod, match = string.find, math.fmod, string.match

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

-- out is the reply under construction (check.lua starts it anew each
-- call): now, then four results per limit.
local out = {}

-- A check's head travels as one argument, "cost mode m": its cost, its
-- mode (2 * max_delay_us + peek, peek 0|1: 0 and 1 for a plain check and
-- a peek, more for a reservation of up to max_delay_us) and its number of
-- limits. head decodes it into a record n, peek, maxd, m, remembered by
-- its text (memo, arith.lua).
local function head(s)
  local h = memo[s]
  if h then return h end
  local n, mode, m = match(s or '', '^(%d+) (%d+) (%d+)$')
  if not n then error('ratewarden: bad check ' .. tostring(s)) end
  mode = tonumber(mode)
  local b = fmod(mode, 2)
  return remember(s, {n = tonumber(n), peek = b == 1, maxd = (mode - b) / 2, m = tonumber(m)})
end

-- reserve turns a denied check into a reservation when every limit is a
-- token bucket and the largest wait any of them needs (their verdicts
-- are in out from out[o + 1], their states in states) is within maxd:
-- each bucket reserves n for now + that wait (algo.TokenBucketReserve,
-- consuming unless peek). Otherwise the denial stands.
local function reserve(o, n, peek, m, ai, ki, maxd)
  local delay = 0
  for j = 1, m do
    if limit(ARGV[ai + j - 1]).code ~= '2' then return end
    local q = o + 4 * (j - 1)
    if out[q + 1] == 0 and out[q + 3] > delay then delay = out[q + 3] end
  end
  if delay > maxd then return end
  for j = 1, m do
    local l = limit(ARGV[ai + j - 1])
    local q = o + 4 * (j - 1)
    out[q + 1], out[q + 2], out[q + 3], out[q + 4] = token_bucket_reserve(states[j], KEYS[ki + j - 1], l.rate, l.P, l.cap, n, delay, not peek)
  end
end

-- run decides one check, whose head is h, with its limits from ARGV[ai]
-- and its keys from KEYS[ki]; results from out[o + 1].
local function run(o, h, ai, ki)
  local n, peek, m, maxd = h.n, h.peek, h.m, h.maxd
  if m == 1 then
    -- One limit: its verdict is the check's, so one pass decides and
    -- consumes (consuming changes nothing when it denies).
    local st, key, l = states[1], KEYS[ki], memo[ARGV[ai]] or limit(ARGV[ai])
    local P = l.P
    l.load(st, key, P)
    out[o + 1], out[o + 2], out[o + 3], out[o + 4] = l.decide(st, key, l.rate, P, l.cap, n, not peek and n > 0)
    if maxd > 0 and out[o + 1] == 0 then reserve(o, n, peek, 1, ai, ki, maxd) end
    return
  end
  local ok = true
  -- Pass 1: every limit's verdict, consuming nothing.
  for j = 1, m do
    local st, key, l = state(j), KEYS[ki + j - 1], limit(ARGV[ai + j - 1])
    l.load(st, key, l.P)
    local q = o + 4 * (j - 1)
    out[q + 1], out[q + 2], out[q + 3], out[q + 4] = l.decide(st, key, l.rate, l.P, l.cap, n, false)
    if out[q + 1] == 0 then ok = false end
  end
  -- Pass 2: all admit, so consume from every limit.
  if ok and not peek and n > 0 then
    for j = 1, m do
      local l = limit(ARGV[ai + j - 1])
      local q = o + 4 * (j - 1)
      out[q + 1], out[q + 2], out[q + 3], out[q + 4] = l.decide(states[j], KEYS[ki + j - 1], l.rate, l.P, l.cap, n, true)
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
local function key_state(e)
  local msg = e
  if type(e) == 'table' then msg = e.err end
  msg = tostring(msg)
  return find(msg, 'WRONGTYPE', 1, true) ~= nil or find(msg, 'ratewarden: malformed', 1, true) ~= nil
end
