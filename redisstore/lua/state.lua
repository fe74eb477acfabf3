-- The state a key holds in Redis, one key per caller key and limit. These
-- formats are the compatibility contract between replicas: they belong to
-- key format 2 (redisstore.KeyFormat, key.go), and a change to any of them
-- takes a new key format, so that replicas of different versions never read
-- each other's keys.
--
--   fixed_window: the count of the current window, an integer. The window
--       is the one that ends at the key's expiry (start = expiry - P).
--   sliding_window: the counts of the current window and of the one before
--       it, as one integer: prev * 100 + curr while both are below 100 (so
--       below 10^4), else 10^4 + prev * 10^8 + curr while both are below
--       9 * 10^7 (so below 2^53), otherwise the string "curr prev". The
--       current window is the one that starts two periods before the
--       expiry.
--   token_bucket: one integer F * 1000 + d. The bucket's theoretical
--       arrival time (TAT) is T + F/rate µs with 0 <= F < rate; the key
--       expires at E, the instant T (T + 1 when F > 0) rounded up to the
--       millisecond, and d = E - (T or T + 1), 0 <= d < 1000.
--   sliding_log: a sorted set with one member "<instant>:<index>" per
--       admitted unit, scored by its instant (µs).
--
-- So the windows and the bucket keep their instants in the key's expiry,
-- where Redis keeps one anyway, and their value is a small integer: Redis
-- stores it in the key's object (or shares it, below 10000) instead of a
-- string. Periods are whole milliseconds, so every window boundary is too
-- and the expiry gives the window back exactly.
--
-- Redis 6.2 has no PEXPIRETIME, so there the windows and the bucket write
-- long forms that carry their instants: "start count" (fixed_window),
-- "start curr prev" (sliding_window), "T F" (token_bucket). Every version
-- reads both forms, so data that moves from a 6.2 server to a later one
-- (an upgrade of Redis itself) keeps counting.
--
-- Every write sets the key's expiry in the same command (the log: in the
-- same script), at the instant the algorithm gives, in ms rounded up. A
-- value of none of these forms, or a compact value without an expiry, is
-- malformed.
--
-- A check reads a key into a state record, a table with named fields that
-- the algorithms read (and that a multi-limit check keeps from its verdict
-- pass to its consume pass):
--
--   windows:      start, curr, prev    the window start (µs) and counts
--                                      (fixed_window: prev is 0)
--                 compact              read from a compact integer form
--   token bucket: tat, frac            T and F (0, 0: no key)
--   sliding log:  live, newest         the units in (now - P, now] and the
--                                      newest instant; the members stay
--                                      in Redis
--
-- Needs now (clock.lua) and int, ms_at, decimal (arith.lua).

local call, fmod, match, tonumber = redis.call, math.fmod, string.match, tonumber

-- COMPACT: the server has PEXPIRETIME (Redis 7.0 and later, which also
-- brought redis.REDIS_VERSION_NUM), so the compact forms can be written.
local COMPACT = redis.REDIS_VERSION_NUM ~= nil

-- new_state returns a record holding every field, so that loading any
-- algorithm's state into it never grows the table.
local function new_state()
  return {start = 0, curr = 0, prev = 0, compact = false, tat = 0, frac = 0, live = 0, newest = 0}
end

-- expiry returns the key's expiry in µs; a key of the windows or the bucket
-- without one is malformed.
local function expiry(key, what)
  local at = call('PEXPIRETIME', key)
  if at < 0 then error('ratewarden: malformed ' .. what .. ' state: no expiry') end
  return at * 1000
end

-- ms_up returns the instant us rounded up to the millisecond, in µs.
local function ms_up(us)
  local r = fmod(us, 1000)
  if r > 0 then return us + 1000 - r end
  return us
end

local function load_fixed(st, key, P)
  local v = call('GET', key)
  st.compact = false
  if not v then
    st.start, st.curr, st.prev = 0, 0, 0
    return
  end
  if match(v, '^%d+$') then
    st.start, st.curr, st.prev = expiry(key, 'fixed window') - P, tonumber(v), 0
    st.compact = true
    return
  end
  local s, c = match(v, '^(%d+) (%d+)$')
  if not s then error('ratewarden: malformed fixed window state') end
  st.start, st.curr, st.prev = tonumber(s), tonumber(c), 0
end

-- save_fixed writes the count of the window that starts at ws, expiring at
-- its end; with keep the key keeps the expiry it has (every form of a
-- window's state has the same expiry, its end). Given the state st its
-- count was read into and the units n a check added to it, it adds them
-- with INCRBY when the key holds this window in the compact form: the
-- same value and expiry (INCRBY keeps it), for a third of Redis' work.
local function save_fixed(key, count, ws, P, keep, st, n)
  if st and COMPACT and st.compact and st.start == ws then
    call('INCRBY', key, decimal(n))
    return
  end
  local v = decimal(count)
  if not COMPACT then v = int(ws) .. ' ' .. v end
  if keep then
    call('SET', key, v, 'KEEPTTL')
  else
    call('SET', key, v, 'PXAT', ms_at(ws + P))
  end
end

-- The sliding window's two counts in one integer: prev * 100 + curr below
-- 10^4 (both below 100: an integer Redis shares), else 10^4 + prev * 10^8 +
-- curr (both below 9 * 10^7: below 2^53).
local SMALL, PACK, PACKMAX = 10000, 100000000, 90000000

local function load_sliding(st, key, P)
  local v = call('GET', key)
  st.compact = false
  if not v then
    st.start, st.curr, st.prev = 0, 0, 0
    return
  end
  local c, p
  if match(v, '^%d+$') then
    st.compact = true
    local x = tonumber(v)
    if x < SMALL then
      c = fmod(x, 100)
      p = (x - c) / 100
    else
      x = x - SMALL
      c = fmod(x, PACK)
      p = (x - c) / PACK
    end
  else
    local a, b, d = match(v, '^(%d+) (%d+) (%d+)$')
    if a then
      st.start, st.curr, st.prev = tonumber(a), tonumber(b), tonumber(d)
      return
    end
    a, b = match(v, '^(%d+) (%d+)$')
    if not a then error('ratewarden: malformed sliding window state') end
    c, p = tonumber(a), tonumber(b)
  end
  st.start, st.curr, st.prev = expiry(key, 'sliding window') - 2 * P, c, p
end

-- save_sliding writes the counts of the window that starts at ws and of
-- the one before it, expiring when both have left the sliding window.
-- Given st and n, as save_fixed, it adds n with INCRBY when the key holds
-- this window in a compact form that the new count keeps.
local function save_sliding(key, curr, prev, ws, P, st, n)
  local small = curr < 100 and prev < 100
  if st and COMPACT and st.compact and st.start == ws then
    local was = curr - n
    -- small before and after (was <= curr), or packed before and after
    if small or not (was < 100 and prev < 100 or curr >= PACKMAX) then
      call('INCRBY', key, decimal(n))
      return
    end
  end
  local v
  if not COMPACT then
    v = int(ws) .. ' ' .. int(curr) .. ' ' .. int(prev)
  elseif small then
    v = decimal(prev * 100 + curr)
  elseif curr < PACKMAX and prev < PACKMAX then
    v = int(SMALL + prev * PACK + curr)
  else
    v = int(curr) .. ' ' .. int(prev)
  end
  call('SET', key, v, 'PXAT', ms_at(ws + 2 * P))
end

local function load_bucket(st, key)
  local v = call('GET', key)
  if not v then
    st.tat, st.frac = 0, 0
    return
  end
  if not match(v, '^%d+$') then
    local t, f = match(v, '^(%d+) (%d+)$')
    if not t then error('ratewarden: malformed token bucket state') end
    st.tat, st.frac = tonumber(t), tonumber(f)
    return
  end
  local x = tonumber(v)
  local d = fmod(x, 1000)
  local f = (x - d) / 1000
  local t = expiry(key, 'token bucket') - d
  if f > 0 then t = t - 1 end
  st.tat, st.frac = t, f
end

-- save_bucket writes a TAT, expiring when the bucket is full again: at
-- the TAT rounded up to the µs, and then to the ms.
local function save_bucket(key, tat, frac)
  local u = tat
  if frac > 0 then u = tat + 1 end
  local e = ms_up(u)
  if COMPACT then
    call('SET', key, int(frac * 1000 + e - u), 'PXAT', int(e / 1000))
  else
    call('SET', key, int(tat) .. ' ' .. int(frac), 'PXAT', int(e / 1000))
  end
end

-- load_log reads only what the verdict needs: the live count and the
-- newest instant, not the whole log.
local function load_log(st, key, P)
  local cut = now - P
  local last = call('ZRANGE', key, -1, -1, 'WITHSCORES')
  local l = last[2] and tonumber(last[2])
  if not l or l <= cut then
    st.live, st.newest = 0, 0
    return
  end
  st.live, st.newest = call('ZCOUNT', key, '(' .. int(cut), '+inf'), l
end

-- Members are "<now>:<index>" with index counting from the live count, so
-- they are unique while Redis' clock does not step back; if it does and a
-- name is taken, the loop after ZADD picks further indexes.
local CHUNK = 1000 -- members per ZADD, far below Lua's unpack limit

-- append_log drops the entries at or before cut and adds n members at now;
-- the caller sets the expiry.
local function append_log(key, cut, live, n)
  call('ZREMRANGEBYSCORE', key, '-inf', int(cut))
  local sn = int(now)
  local added, i = 0, 0
  while i < n do
    local e = i + CHUNK
    if e > n then e = n end
    local a = {}
    for x = i, e - 1 do
      a[#a + 1] = sn
      a[#a + 1] = sn .. ':' .. int(live + x)
    end
    added = added + call('ZADD', key, unpack(a))
    i = e
  end
  local idx = live + n
  while added < n do
    added = added + call('ZADD', key, sn, sn .. ':' .. int(idx))
    idx = idx + 1
  end
end
