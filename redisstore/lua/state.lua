-- The state a key holds in Redis, one key per caller key and limit. These
-- formats are the compatibility contract: replicas of different versions
-- share keys, so a format never changes.
--
--   fixed_window, sliding_window: a string "start curr prev", the start of
--       the current window (µs), the units counted in it, and the units
--       counted in the window before it (sliding_window; fixed_window
--       always writes 0).
--   token_bucket: a string "T" or "T F", the theoretical arrival time
--       (TAT) T + F/rate µs with 0 <= F < rate; "T" when F is 0.
--   sliding_log: a sorted set with one member "<instant>:<index>" per
--       admitted unit, scored by its instant (µs).
--
-- Every write sets the key's expiry in the same command (the log: in the
-- same script), at the instant the algorithm gives, in ms rounded up.
--
-- A check reads a key into a state record, a table with named fields that
-- the algorithms read (and that a multi-limit check keeps from its verdict
-- pass to its consume pass):
--
--   windows:      start, curr, prev    as stored
--   token bucket: tat, frac            T and F as stored (0, 0: no key)
--   sliding log:  live, newest         the units in (now - P, now] and the
--                                      newest instant; the members stay
--                                      in Redis
--
-- Needs now (clock.lua) and int, ms_at (arith.lua).

local call, format, match, tonumber = redis.call, string.format, string.match, tonumber

-- new_state returns a record holding every field, so that loading any
-- algorithm's state into it never grows the table.
local function new_state()
  return {start = 0, curr = 0, prev = 0, tat = 0, frac = 0, live = 0, newest = 0}
end

local function load_window(st, key)
  local v = call('GET', key)
  if not v then
    st.start, st.curr, st.prev = 0, 0, 0
    return
  end
  local s, c, p = match(v, '^(%d+) (%d+) (%d+)$')
  if not s then error('ratewarden: malformed window state') end
  st.start, st.curr, st.prev = tonumber(s), tonumber(c), tonumber(p)
end

-- save_window writes a window's state expiring at expire (µs); with
-- expire nil the key keeps the expiry it has.
local function save_window(key, start, curr, prev, expire)
  local v = format('%d %d %d', start, curr, prev)
  if expire then
    call('SET', key, v, 'PXAT', ms_at(expire))
  else
    call('SET', key, v, 'KEEPTTL')
  end
end

local function load_bucket(st, key)
  local v = call('GET', key)
  if not v then
    st.tat, st.frac = 0, 0
    return
  end
  local t, f = match(v, '^(%d+)$'), '0'
  if not t then t, f = match(v, '^(%d+) (%d+)$') end
  if not t then error('ratewarden: malformed token bucket state') end
  st.tat, st.frac = tonumber(t), tonumber(f)
end

local function save_bucket(key, tat, frac, expire)
  local v
  if frac > 0 then v = format('%d %d', tat, frac) else v = format('%d', tat) end
  call('SET', key, v, 'PXAT', ms_at(expire))
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
