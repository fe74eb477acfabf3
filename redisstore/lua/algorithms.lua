-- The four algorithms, mirroring internal/algo operation for operation so
-- that both agree bit for bit (the differential test holds them to it).
-- All instants and durations are integer microseconds, and all arithmetic
-- is exact (arith.lua).
--
-- Each algorithm decides one limit on a state record its loader filled
-- (state.lua), with the same arguments and results:
--
--   load(st, key, P)
--   decide(st, key, rate, P, cap, n, consume)
--       -> allowed (0|1), remaining, retry_after_us, reset_after_us
--
-- rate, P (the period, µs) and cap (the capacity: a token bucket's burst,
-- the rate for the others) are the limit, n the cost. With consume false it
-- only gives the verdict; with consume true it also writes the consumption
-- when it admits n > 0. st is not updated: a check decides each limit at
-- most twice, verdict then consumption, from the state it read.
--
-- Needs now (clock.lua); muldiv, int, memo and remember (arith.lua); the
-- loaders and writers of state.lua (load_*, save_*, append_log).

local call, fmod, tonumber = redis.call, math.fmod, tonumber

-- algo.FixedWindow
local function fixed_window(st, key, rate, P, cap, n, consume)
  local ws = now - fmod(now, P)
  local e = ws + P
  local count = 0
  if st.start == ws then count = st.curr end
  local rem = rate - count
  if rem < 0 then rem = 0 end
  local allowed, retry, reset = 0, 0, 0
  if n <= rem then
    allowed = 1
    if consume and n > 0 then
      count = count + n
      rem = rem - n
      save_fixed(key, count, ws, P, false, st, n)
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
local function sliding_window(st, key, rate, P, cap, n, consume)
  local ws = now - fmod(now, P)
  local curr, prev = 0, 0
  if st.start == ws then
    curr, prev = st.curr, st.prev
  elseif st.start == ws - P then
    prev = st.curr
  end
  local elapsed = now - ws
  local w = 0
  if prev > 0 then w = weighted(prev, P, elapsed) end
  local rem = rate - curr - w
  if rem < 0 then rem = 0 end
  local allowed, retry, reset = 0, 0, 0
  if n <= rem then
    allowed = 1
    if consume and n > 0 then
      curr = curr + n
      rem = rem - n
      save_sliding(key, curr, prev, ws, P, st, n)
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

-- algo.bucketUsed: the units the TAT stands for at now, rounded up.
local function used(tat, frac, rate, P)
  local q, r = muldiv(tat - now, rate, P)
  r = r + frac
  if r >= P then q, r = q + 1, r - P end
  if r > 0 then q = q + 1 end
  return q
end

-- algo.bucketAdvance: the TAT n emission intervals (n * P / rate) later.
local function advance(tat, frac, n, rate, P)
  local q, r = muldiv(n, P, rate)
  frac = frac + r
  if frac >= rate then q, frac = q + 1, frac - rate end
  return tat + q, frac
end

-- algo.bucketRetry: the first delay (>= 1 µs) after which n units fit.
local function bucket_retry(tat, frac, rate, P, cap, n)
  local q, r = muldiv(cap - n, P, rate)
  if r < frac then q = q - 1 end
  local d = tat - now - q
  if d < 1 then d = 1 end
  return d
end

-- algo.ceilTAT
local function ceil_tat(tat, frac)
  if frac > 0 then return tat + 1 end
  return tat
end

-- algo.TokenBucket (GCRA). The stored TAT as it reads at now: a fraction
-- from a larger rate rounds up, a TAT in the past is a full bucket.
local function token_bucket(st, key, rate, P, cap, n, consume)
  local tat, frac = st.tat, st.frac
  if frac >= rate then tat, frac = tat + 1, 0 end
  if tat < now then tat, frac = now, 0 end
  local rem = cap - used(tat, frac, rate, P)
  if rem < 0 then rem = 0 end
  local allowed, retry = 0, 0
  if n <= rem then
    allowed = 1
    if consume and n > 0 then
      tat, frac = advance(tat, frac, n, rate, P)
      rem = cap - used(tat, frac, rate, P)
      if rem < 0 then rem = 0 end
      save_bucket(key, tat, frac)
    end
  else
    retry = bucket_retry(tat, frac, rate, P, cap, n)
  end
  return allowed, rem, retry, ceil_tat(tat, frac) - now
end

-- algo.TokenBucketReserve: n units reserved for now + delay (delay at
-- least the wait n needs here, or 0), admitted for use then; with consume
-- the TAT moves as if they arrived then. Remaining is read at now, and
-- the delay rides in the retry_after slot (an admission has no retry).
local function token_bucket_reserve(st, key, rate, P, cap, n, delay, consume)
  local tat, frac = st.tat, st.frac
  if frac >= rate then tat, frac = tat + 1, 0 end
  if tat < now then tat, frac = now, 0 end
  if consume and n > 0 then
    local at = now + delay
    if tat < at then tat, frac = at, 0 end
    tat, frac = advance(tat, frac, n, rate, P)
    save_bucket(key, tat, frac)
  end
  local rem = cap - used(tat, frac, rate, P)
  if rem < 0 then rem = 0 end
  return 1, rem, delay, ceil_tat(tat, frac) - now
end

-- algo.SlidingLog
local function sliding_log(st, key, rate, P, cap, n, consume)
  local live, newest = st.live, st.newest
  local rem = rate - live
  if rem < 0 then rem = 0 end
  local allowed, retry, reset = 0, 0, 0
  if n <= rem then
    allowed = 1
    if consume and n > 0 then
      append_log(key, now - P, live, n)
      rem = rem - n
      live, newest = live + n, now
      call('PEXPIREAT', key, ms_at(newest + P))
    end
  else
    -- The oldest live + n - rate units must leave the window first.
    local k = live + n - rate
    local r = call('ZRANGEBYSCORE', key, '(' .. int(now - P), '+inf', 'WITHSCORES', 'LIMIT', k - 1, 1)
    retry = tonumber(r[2]) + P - now
  end
  if live > 0 then reset = newest + P - now end
  return allowed, rem, retry, reset
end

-- The table of algorithms, by the code the Go side sends (redisstore's
-- wireCode): the loader that reads a key's state into a
-- record, and the algorithm that decides on it.
local function algorithm(code)
  if code == '0' then return load_sliding, sliding_window end
  if code == '1' then return load_fixed, fixed_window end
  if code == '2' then return load_bucket, token_bucket end
  if code == '3' then return load_log, sliding_log end
end

-- A limit travels as one argument, "code rate period_us capacity"
-- (redisstore.limitEnc). limit decodes it into a record
--   code, load, decide, rate, P, cap
-- remembered by its text (memo, arith.lua): a caller's few limits are
-- decoded once per function library, not once per check.
local match = string.match
local function limit(s)
  local l = memo[s]
  if l then return l end
  local code, rate, P, cap = match(s or '', '^(%d) (%d+) (%d+) (%d+)$')
  local load, decide = algorithm(code)
  if not load then error('ratewarden: bad limit ' .. tostring(s)) end
  return remember(s, {code = code, load = load, decide = decide, rate = tonumber(rate), P = tonumber(P), cap = tonumber(cap)})
end

-- read_limit decodes the limit in ARGV[i]: load, decide, rate, P, cap, code.
local function read_limit(i)
  local l = limit(ARGV[i])
  return l.load, l.decide, l.rate, l.P, l.cap, l.code
end
