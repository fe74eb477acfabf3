-- ratewarden leases: one replica takes a batch of capacity from a key's
-- state in one atomic step, or gives unused fixed-window units back. The
-- state is the very state lua/check.lua keeps, in the same format and with
-- the same expiry, so leases and plain checks share one count.
--
-- KEYS[1]: the key. ARGV from ARGV[base]:
--   'take', algorithm, rate, period_us, capacity, need, want
--       take min(want, remaining) units if at least need remain
--       (need <= want); algorithm 1 fixed_window or 2 token_bucket.
--   'give', window_start_us, units
--       fixed_window only: take units back off the count of the window
--       that starts at window_start_us, if the key still holds that
--       window; never below 0; the expiry stays as it is.
--
-- Reply to take: now, granted, remaining, a, b (integers, µs)
--   fixed_window: a = b = time left in the window
--   token_bucket: a = the first leased unit's instant - now (0 or more),
--                 b = the new TAT - now
--   denied (granted 0): a = retry-after for need units, b = reset-after
-- Reply to give: now, units given back.

local ceil, fmod = math.ceil, math.fmod
local call, format, match, tonumber = redis.call, string.format, string.match, tonumber
local function int(x) return format('%d', x) end

local key, op = KEYS[1], ARGV[base]

local function window()
  local v = call('GET', key)
  if not v then return nil end
  local s, c, p = match(v, '^(%d+) (%d+) (%d+)$')
  if not s then error('ratewarden: malformed window state at ' .. key) end
  return tonumber(s), tonumber(c), tonumber(p)
end

if op == 'give' then
  local ws, units = tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2])
  local s, c = window()
  if s ~= ws or c == 0 then return {now, 0} end
  if units > c then units = c end
  call('SET', key, format('%d %d %d', s, c - units, 0), 'KEEPTTL')
  return {now, units}
end

local alg = ARGV[base + 1]
local rate, P, cap = tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3]), tonumber(ARGV[base + 4])
local need, want = tonumber(ARGV[base + 5]), tonumber(ARGV[base + 6])

if alg == '1' then
  -- As check.lua's fixed_window: epoch-aligned windows, "start count 0",
  -- expiring at the window's end rounded up to the millisecond.
  local ws = now - fmod(now, P)
  local e = ws + P
  local count = 0
  local s, c = window()
  if s == ws then count = c end
  local rem = rate - count
  if rem < 0 then rem = 0 end
  if need > rem then
    local reset = 0
    if count > 0 then reset = e - now end
    return {now, 0, rem, e - now, reset}
  end
  local take = want
  if take > rem then take = rem end
  call('SET', key, format('%d %d %d', ws, count + take, 0), 'PXAT', int(ceil(e / 1000)))
  return {now, take, rem - take, e - now, e - now}
end

if alg ~= '2' then error('ratewarden: leases need fixed_window or token_bucket, got code ' .. tostring(alg)) end

-- As check.lua's token_bucket (GCRA): the state is the TAT ("T" or
-- "T F", see arith.lua), expiring at the TAT rounded up to the millisecond.
local t, f = 0, 0
local v = call('GET', key)
if v then t, f = parse_tat(v, key) end
t, f = bucket_now(t, f, rate)
local function ceil_tat(t, f)
  if f > 0 then return t + 1 end
  return t
end
local rem = cap - used(t, f, rate, P)
if rem < 0 then rem = 0 end
if need > rem then
  return {now, 0, rem, bucket_retry(t, f, rate, P, cap, need), ceil_tat(t, f) - now}
end
local take = want
if take > rem then take = rem end
local nt, nf = advance(t, f, take, rate, P)
local e = ceil_tat(nt, nf)
call('SET', key, tat_string(nt, nf), 'PXAT', int(ceil(e / 1000)))
local left = cap - used(nt, nf, rate, P)
if left < 0 then left = 0 end
return {now, take, left, ceil_tat(t, f) - now, e - now}
