-- The charge script (Store.Charge): applies units counted outside a check
-- to a key's state without deciding anything: charges (units consumed
-- elsewhere, or a settlement's extra cost) and refunds (a settlement's
-- unused estimate, a reservation given back). It mirrors
-- algo.ChargeWindow, algo.ChargeBucket and algo.ChargeLog operation for
-- operation, and keeps no state of its own: it reads and writes the state
-- check.lua keeps, in the same formats and expiries.
--
-- Needs now and base (clock.lua); muldiv, int, ms_at (arith.lua);
-- new_state, the loaders and writers (state.lua); read_limit, used,
-- advance and ceil_tat (algorithms.lua).
--
-- KEYS: one per limit. ARGV from ARGV[base]:
--   m, then m limits (one argument each, read_limit), then pairs
--   units, ago_us   oldest first: units counted at now - ago_us
-- units > 0 is a charge, units < 0 a refund; ago_us < 0 (refunds only)
-- dates a token bucket reservation not yet reached by the TAT it left.
-- Each pair counts where a check at its instant counted or would have
-- counted it, as far as that still matters at now (ratewarden.Charger);
-- units whose effect has ended are dropped. A charge never denies: the
-- count may pass the limit.
--
-- Reply: now, then per limit the units applied (signed: the sum of the
-- units, less what was dropped). A key holding another type or a
-- malformed state: Redis' WRONGTYPE or the loader's error, as for a
-- check; every key is read before the first write, so nothing is written
-- then.
--
-- A state a refund leaves empty (a window with no count, a bucket back to
-- full, a log with no entry) is deleted rather than stored; every other
-- write sets the expiry the algorithm gives, as a check's does.

local call, fmod, tonumber = redis.call, math.fmod, tonumber

local m = tonumber(ARGV[base])
local pb = base + 1 + m -- the first pair
local npairs = (#ARGV - pb + 1) / 2
local units, ats = {}, {}
for i = 1, npairs do
  units[i] = tonumber(ARGV[pb + 2 * i - 2])
  ats[i] = now - tonumber(ARGV[pb + 2 * i - 1])
end

-- algo.chargeCount: count + u, not below 0, and the change.
local function charge_count(count, u)
  if u < -count then u = -count end
  return count + u, u
end

-- algo.ChargeWindow
local function charge_window(key, st, P, sliding)
  local ws = now - fmod(now, P)
  local curr, prev = 0, 0
  if st.start == ws then
    curr, prev = st.curr, st.prev
  elseif sliding and st.start == ws - P then
    prev = st.curr
  end
  local applied, changed, d = 0, false, 0
  for i = 1, npairs do
    local at = ats[i]
    if at <= now then
      local w = at - fmod(at, P)
      if w == ws then
        curr, d = charge_count(curr, units[i])
        applied = applied + d
        if d ~= 0 then changed = true end
      elseif sliding and w == ws - P then
        prev, d = charge_count(prev, units[i])
        applied = applied + d
        if d ~= 0 then changed = true end
      end
    end
  end
  if not changed then return 0 end
  if curr == 0 and prev == 0 then
    call('DEL', key) -- the same as no state
  elseif sliding then
    save_sliding(key, curr, prev, ws, P)
  else
    save_fixed(key, curr, ws, P)
  end
  return applied
end

-- algo.ChargeHorizon: a charge takes a TAT at most 2 × MaxPeriod (366
-- days, in µs) past now.
local HORIZON = 2 * 31622400000000

-- algo.bucketRoom: the whole units whose intervals fit between the TAT
-- and the instant h.
local function room(tat, frac, h, rate, P)
  if tat >= h then return 0 end
  local q, r = muldiv(h - tat, rate, P)
  if r < frac then q = q - 1 end
  if q < 0 then q = 0 end
  return q
end

-- algo.bucketBack: the TAT n emission intervals earlier.
local function back(tat, frac, n, rate, P)
  local q, r = muldiv(n, P, rate)
  frac = frac - r
  if frac < 0 then q, frac = q + 1, frac + rate end
  return tat - q, frac
end

-- algo.nearTAT: the TAT within half an emission interval of at. Past
-- P / rate + 2 µs it is not; within, every product is below 4 × P.
local function near(tat, frac, at, rate, P)
  local d = tat - at
  local lim = (P - fmod(P, rate)) / rate + 2
  if d > lim or d < -lim then return false end
  local x = d * rate + frac
  if x < 0 then x = -x end
  return 2 * x <= P
end

-- algo.ChargeBucket
local function charge_bucket(key, st, rate, P)
  local tat, frac = st.tat, st.frac
  if frac >= rate then tat, frac = tat + 1, 0 end
  local applied, charged, changed = 0, 0, false
  for i = 1, npairs do
    local u, at = units[i], ats[i]
    if u > 0 then
      if tat < at then tat, frac = at, 0 end
      local n = room(tat, frac, now + HORIZON, rate, P)
      if u < n then n = u end
      tat, frac = advance(tat, frac, n, rate, P)
      charged, changed = charged + n, true
    elseif tat < now then -- full: nothing to give back
    elseif at > now and not near(tat, frac, at, rate, P) then -- reserved on top
    else
      local held = used(tat, frac, rate, P)
      if -u < held then
        tat, frac = back(tat, frac, -u, rate, P)
        applied = applied + u
      else
        tat, frac = now, 0 -- all it holds: full
        applied = applied - held
      end
      if tat < now then tat, frac = now, 0 end
      changed = true
    end
  end
  if not changed then return 0 end
  if ceil_tat(tat, frac) <= now then
    call('DEL', key) -- full: the same as no state
    return applied
  end
  save_bucket(key, tat, frac)
  return applied + charged
end

-- Members of charged entries are "<instant>:c<index>", apart from the
-- check's "<instant>:<index>"; a name taken already (an earlier charge at
-- the same instant) is skipped for the next index.
local CHUNK = 1000 -- members per ZADD, far below Lua's unpack limit

-- add_entries adds n members scored at to the log key, from index idx.
local function add_entries(key, at, n, idx)
  local sn = int(at)
  local added = 0
  while added < n do
    local e = n - added
    if e > CHUNK then e = CHUNK end
    local a = {}
    for x = 0, e - 1 do
      a[#a + 1] = sn
      a[#a + 1] = sn .. ':c' .. int(idx + x)
    end
    added = added + call('ZADD', key, unpack(a))
    idx = idx + e
  end
end

-- algo.ChargeLog
local function charge_log(key, rate, P)
  local cut = now - P
  local changed = call('ZREMRANGEBYSCORE', key, '-inf', int(cut)) > 0
  local len = call('ZCARD', key)
  local applied = 0
  for i = 1, npairs do
    local u, at = units[i], ats[i]
    if u > 0 and at > cut then
      -- Rate entries at one instant fill the window until they leave
      -- it: more would change no decision, only memory.
      local n = u
      if n > rate then n = rate end
      add_entries(key, at, n, len)
      len, applied, changed = len + n, applied + n, true
    elseif u < 0 and at <= now and at > cut and len > 0 then
      -- The entries at or before at, newest first, then the oldest
      -- after it: ranks k to k + n - 1, around j, the count at or
      -- before at.
      local j = call('ZCOUNT', key, '-inf', int(at))
      local n = -u
      if n > len then n = len end
      local k = j - n
      if k < 0 then k = 0 end
      call('ZREMRANGEBYRANK', key, k, k + n - 1)
      len, applied, changed = len - n, applied - n, true
    end
  end
  if changed and len > 0 then
    local last = call('ZRANGE', key, -1, -1, 'WITHSCORES')
    call('PEXPIREAT', key, ms_at(tonumber(last[2]) + P))
  end -- an empty log is no key
  return applied
end

local states = {}
for j = 1, m do
  local load, _, _, P = read_limit(base + j)
  states[j] = new_state()
  load(states[j], KEYS[j], P)
end
local out = {now}
for j = 1, m do
  local key, st = KEYS[j], states[j]
  local _, _, rate, P, _, code = read_limit(base + j)
  if code == '0' or code == '1' then
    out[j + 1] = charge_window(key, st, P, code == '0')
  elseif code == '2' then
    out[j + 1] = charge_bucket(key, st, rate, P)
  else
    out[j + 1] = charge_log(key, rate, P)
  end
end
return out
