-- The charge script (Store.Charge): adds units consumed elsewhere to a
-- key's state without deciding anything, as if each had been checked at
-- the instant it was consumed. It keeps no state of its own: it reads and
-- writes the state check.lua keeps, in the same formats and expiries.
--
-- Needs now and base (clock.lua); muldiv, int, ms_at (arith.lua);
-- new_state, the loaders and writers (state.lua); read_limit and advance
-- (algorithms.lua).
--
-- KEYS: one per limit. ARGV from ARGV[base]:
--   m, then m limits (four arguments each, read_limit), then pairs
--   units, ago_us   oldest first: units consumed ago_us before now
-- Each pair counts where a check at now - ago_us would have counted it,
-- if that still matters at now: in a window that is still the current one
-- (a sliding window's previous one too), in the log while it is in the
-- window, in a token bucket whose TAT it moves past now. Units whose
-- effect has ended are dropped. A charge never denies: the count may pass
-- the limit.
--
-- Reply: now, then per limit the units charged (the rest were dropped).
-- A key holding another type or a malformed state: Redis' WRONGTYPE or the
-- loader's error, as for a check.

local call, fmod, tonumber = redis.call, math.fmod, tonumber

local m = tonumber(ARGV[base])
local pb = base + 1 + 4 * m -- the first pair
local npairs = (#ARGV - pb + 1) / 2

local function charge_window(key, st, P, sliding)
  local ws = now - fmod(now, P)
  local curr, prev = 0, 0
  if st.start == ws then
    curr, prev = st.curr, st.prev
  elseif st.start == ws - P and sliding then
    prev = st.curr
  end
  local got = 0
  for i = 0, npairs - 1 do
    local n, at = tonumber(ARGV[pb + 2 * i]), now - tonumber(ARGV[pb + 2 * i + 1])
    local w = at - fmod(at, P)
    if w == ws then
      curr, got = curr + n, got + n
    elseif sliding and w == ws - P then
      prev, got = prev + n, got + n
    end
  end
  if got == 0 then return 0 end
  if sliding then
    save_sliding(key, curr, prev, ws, P)
  else
    save_fixed(key, curr, ws, P)
  end
  return got
end

local function charge_bucket(key, st, rate, P)
  local tat, frac = st.tat, st.frac
  if frac >= rate then tat, frac = tat + 1, 0 end
  local got = 0
  for i = 0, npairs - 1 do
    local n, at = tonumber(ARGV[pb + 2 * i]), now - tonumber(ARGV[pb + 2 * i + 1])
    if tat < at then tat, frac = at, 0 end
    tat, frac = advance(tat, frac, n, rate, P)
    got = got + n
  end
  local until_ = tat
  if frac > 0 then until_ = tat + 1 end
  if until_ <= now then return 0 end -- refilled already: nothing to keep
  save_bucket(key, tat, frac)
  return got
end

local function charge_log(key, st, P)
  local cut = now - P
  local newest, got = st.newest, 0
  call('ZREMRANGEBYSCORE', key, '-inf', int(cut))
  local live = call('ZCARD', key)
  for i = 0, npairs - 1 do
    local n, at = tonumber(ARGV[pb + 2 * i]), now - tonumber(ARGV[pb + 2 * i + 1])
    if at > cut then
      local sn = int(at)
      local added, idx = 0, live
      while added < n do
        added = added + call('ZADD', key, sn, sn .. ':c' .. int(idx))
        idx = idx + 1
      end
      live, got = live + n, got + n
      if at > newest then newest = at end
    end
  end
  if got > 0 then call('PEXPIREAT', key, ms_at(newest + P)) end
  return got
end

-- Every key is read before the first write, so a key holding another
-- type or a malformed state fails the call with nothing written.
local states = {}
for j = 1, m do
  local load, _, _, P = read_limit(base + 1 + 4 * (j - 1))
  states[j] = new_state()
  load(states[j], KEYS[j], P)
end
local out = {now}
for j = 1, m do
  local ai, key, st = base + 1 + 4 * (j - 1), KEYS[j], states[j]
  local _, _, rate, P = read_limit(ai)
  local code = ARGV[ai]
  if code == '0' or code == '1' then
    out[j + 1] = charge_window(key, st, P, code == '0')
  elseif code == '2' then
    out[j + 1] = charge_bucket(key, st, rate, P)
  else
    out[j + 1] = charge_log(key, st, P)
  end
end
return out
