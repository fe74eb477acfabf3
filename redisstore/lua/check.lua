-- ratewarden checks. Mirrors internal/algo operation for operation, so both
-- agree bit for bit (a differential test holds them to it). All instants
-- and durations are integer microseconds held in doubles, and all
-- arithmetic is exact: integers below 2^53 add, subtract and compare
-- exactly, and every product that can exceed that goes through muldiv.
--
-- ARGV, from ARGV[base], is a list of checks, each
--   cost, peek (0|1), m, then m times: algorithm, rate, period_us, capacity
-- (algorithm: 0 sliding_window, 1 fixed_window, 2 token_bucket,
-- 3 sliding_log). KEYS holds one key per limit, in the same order.
-- The checks run one after the other; each is all-or-nothing.
--
-- Reply: now, then per limit of every check:
--   allowed (0|1), remaining, retry_after_us, reset_after_us
-- A check whose keys hold another type or a malformed state has allowed -1
-- on its first limit (and zeros elsewhere): it fails alone.
-- Integers only: Redis truncates Lua numbers in replies.
--
-- State: windows are one string "start curr prev"; a token bucket is its
-- TAT as "T" or "T F" (TAT = T + F/rate µs); a sliding log is a sorted set
-- with one member per admitted unit, scored by its instant. Every write
-- sets the expiry the algorithm gives (ms, rounded up) in the same command
-- or script.

local ceil, fmod = math.ceil, math.fmod
local call, format, match, tonumber = redis.call, string.format, string.match, tonumber

-- int formats an integral number in full (tostring keeps 14 digits only).
local function int(x) return format('%d', x) end

-- State loaded per limit of the current check, reused by the consume pass.
local SA, SB, SC = {}, {}, {}

local function load_window(j, key)
  local v = call('GET', key)
  if not v then
    SA[j], SB[j], SC[j] = 0, 0, 0
    return
  end
  local s, c, p = match(v, '^(%d+) (%d+) (%d+)$')
  if not s then error('ratewarden: malformed window state at ' .. key) end
  SA[j], SB[j], SC[j] = tonumber(s), tonumber(c), tonumber(p)
end

local function store_window(key, s, c, p, expire)
  call('SET', key, format('%d %d %d', s, c, p), 'PXAT', int(ceil(expire / 1000)))
end

-- algo.FixedWindow
local function fixed_window(j, key, P, rate, n, consume)
  local ws = now - fmod(now, P)
  local e = ws + P
  local count = 0
  if SA[j] == ws then count = SB[j] end
  local rem = rate - count
  if rem < 0 then rem = 0 end
  local allowed, retry, reset = 0, 0, 0
  if n <= rem then
    allowed = 1
    if consume and n > 0 then
      count = count + n
      rem = rem - n
      store_window(key, ws, count, 0, e)
    end
  else
    retry = e - now
  end
  if count > 0 then reset = e - now end
  return allowed, rem, retry, reset
end

-- algo.slidingWeighted
local function weighted(prev, P, e)
  local q, r = muldiv(prev, P - e, P)
  if r > 0 then q = q + 1 end
  return q
end

-- algo.slidingFirst
local function first(prev, P, budget)
  if budget >= prev then return 0 end
  local q = muldiv(budget, P, prev)
  return P - q
end

-- algo.SlidingWindow
local function sliding_window(j, key, P, rate, n, consume)
  local ws = now - fmod(now, P)
  local curr, prev = 0, 0
  if SA[j] == ws then
    curr, prev = SB[j], SC[j]
  elseif SA[j] == ws - P then
    prev = SB[j]
  end
  local elapsed = now - ws
  local w = weighted(prev, P, elapsed)
  local rem = rate - curr - w
  if rem < 0 then rem = 0 end
  local allowed, retry, reset = 0, 0, 0
  if n <= rem then
    allowed = 1
    if consume and n > 0 then
      curr = curr + n
      rem = rem - n
      store_window(key, ws, curr, prev, ws + 2 * P)
    end
  else
    local budget = rate - curr - n
    if budget >= 0 then
      retry = first(prev, P, budget) - elapsed
    else
      retry = P - elapsed
      local b = rate - n
      if curr > b then retry = retry + first(curr, P, b) end
    end
  end
  if curr > 0 then
    reset = ws + 2 * P - now
  elseif w > 0 then
    reset = ws + P - now
  end
  return allowed, rem, retry, reset
end

local function load_tat(j, key)
  local v = call('GET', key)
  if not v then
    SA[j], SB[j] = 0, 0
    return
  end
  SA[j], SB[j] = parse_tat(v, key)
end

local function store_tat(key, t, f, expire)
  call('SET', key, tat_string(t, f), 'PXAT', int(ceil(expire / 1000)))
end

-- algo.TokenBucket
local function token_bucket(j, key, P, rate, cap, n, consume)
  local t, f = bucket_now(SA[j], SB[j], rate)
  local rem = cap - used(t, f, rate, P)
  if rem < 0 then rem = 0 end
  local allowed, retry = 0, 0
  if n <= rem then
    allowed = 1
    if consume and n > 0 then
      t, f = advance(t, f, n, rate, P)
      rem = cap - used(t, f, rate, P)
      if rem < 0 then rem = 0 end
      local e = t
      if f > 0 then e = t + 1 end
      store_tat(key, t, f, e)
    end
  else
    retry = bucket_retry(t, f, rate, P, cap, n)
  end
  local e = t
  if f > 0 then e = t + 1 end
  return allowed, rem, retry, e - now
end

-- load_log reads only what the verdict needs: the live count (entries
-- after now - P) and the newest instant, not the whole log.
local function load_log(j, key, P)
  local cut = now - P
  local last = call('ZRANGE', key, -1, -1, 'WITHSCORES')
  local l = last[2] and tonumber(last[2])
  if not l or l <= cut then
    SA[j], SB[j] = 0, 0
    return
  end
  SA[j] = call('ZCOUNT', key, '(' .. int(cut), '+inf')
  SB[j] = l
end

-- Members are "<now>:<index>" with index counting from the live count, so
-- they are unique while Redis' clock does not step back; if it does and a
-- name is taken, the loop after ZADD picks further indexes.
local CHUNK = 1000 -- members per ZADD, far below Lua's unpack limit

local function append_log(key, cut, cnt, n)
  call('ZREMRANGEBYSCORE', key, '-inf', int(cut))
  local sn = int(now)
  local added, i = 0, 0
  while i < n do
    local e = i + CHUNK
    if e > n then e = n end
    local a = {}
    for x = i, e - 1 do
      a[#a + 1] = sn
      a[#a + 1] = sn .. ':' .. int(cnt + x)
    end
    added = added + call('ZADD', key, unpack(a))
    i = e
  end
  local idx = cnt + n
  while added < n do
    added = added + call('ZADD', key, sn, sn .. ':' .. int(idx))
    idx = idx + 1
  end
end

-- algo.SlidingLog
local function sliding_log(j, key, P, rate, n, consume)
  local cnt, last = SA[j], SB[j]
  local rem = rate - cnt
  if rem < 0 then rem = 0 end
  local allowed, retry, reset = 0, 0, 0
  local wrote = false
  if n <= rem then
    allowed = 1
    if consume and n > 0 then
      append_log(key, now - P, cnt, n)
      rem = rem - n
      wrote = true
    end
  else
    -- The oldest cnt+n-rate units must leave the window first.
    local k = cnt + n - rate
    local r = call('ZRANGEBYSCORE', key, '(' .. int(now - P), '+inf', 'WITHSCORES', 'LIMIT', k - 1, 1)
    retry = tonumber(r[2]) + P - now
  end
  if wrote then
    cnt, last = cnt + n, now
    call('PEXPIREAT', key, int(ceil((last + P) / 1000)))
  end
  if cnt > 0 then reset = last + P - now end
  return allowed, rem, retry, reset
end

local function load(j, alg, key, P)
  if alg == '2' then
    load_tat(j, key)
  elseif alg == '3' then
    load_log(j, key, P)
  elseif alg == '0' or alg == '1' then
    load_window(j, key)
  else
    error('ratewarden: unknown algorithm code ' .. tostring(alg))
  end
end

local function decide(j, alg, key, rate, P, cap, n, consume)
  if alg == '0' then
    return sliding_window(j, key, P, rate, n, consume)
  elseif alg == '1' then
    return fixed_window(j, key, P, rate, n, consume)
  elseif alg == '2' then
    return token_bucket(j, key, P, rate, cap, n, consume)
  end
  return sliding_log(j, key, P, rate, n, consume)
end

local out = {now}

-- run decides one check: m limits from KEYS[ki] and ARGV[ai], cost n,
-- results from out[o + 1].
local function run(o, n, peek, m, ai, ki)
  if m == 1 then
    -- One limit: its verdict is the check's, so one pass decides and
    -- consumes (consuming changes nothing when it denies).
    local key, alg, P = KEYS[ki], ARGV[ai], tonumber(ARGV[ai + 2])
    load(1, alg, key, P)
    out[o + 1], out[o + 2], out[o + 3], out[o + 4] = decide(1, alg, key, tonumber(ARGV[ai + 1]), P, tonumber(ARGV[ai + 3]), n, not peek and n > 0)
    return
  end
  local ok = true
  -- Pass 1: every limit's verdict, consuming nothing.
  for j = 1, m do
    local p, key = ai + 4 * (j - 1), KEYS[ki + j - 1]
    local alg, P = ARGV[p], tonumber(ARGV[p + 2])
    load(j, alg, key, P)
    local a, rem, retry, reset = decide(j, alg, key, tonumber(ARGV[p + 1]), P, tonumber(ARGV[p + 3]), n, false)
    local q = o + 4 * (j - 1)
    out[q + 1], out[q + 2], out[q + 3], out[q + 4] = a, rem, retry, reset
    if a == 0 then ok = false end
  end
  -- Pass 2: all admit, so consume from every limit.
  if ok and not peek and n > 0 then
    for j = 1, m do
      local p, key = ai + 4 * (j - 1), KEYS[ki + j - 1]
      local a, rem, retry, reset = decide(j, ARGV[p], key, tonumber(ARGV[p + 1]), tonumber(ARGV[p + 2]), tonumber(ARGV[p + 3]), n, true)
      local q = o + 4 * (j - 1)
      out[q + 1], out[q + 2], out[q + 3], out[q + 4] = a, rem, retry, reset
    end
  end
end

local ki, ai, nargs = 1, base, #ARGV
while ai <= nargs do
  local n, peek, m = tonumber(ARGV[ai]), ARGV[ai + 1] == '1', tonumber(ARGV[ai + 2])
  ai = ai + 3
  local o = #out
  if not pcall(run, o, n, peek, m, ai, ki) then
    -- A key of this check holds another type or a malformed state. Every
    -- read comes before the check's first write, so it wrote nothing; it
    -- fails alone (allowed -1) and the other checks of a batch go on.
    for q = o + 1, o + 4 * m do out[q] = 0 end
    out[o + 1] = -1
  end
  ai, ki = ai + 4 * m, ki + m
end
return out
