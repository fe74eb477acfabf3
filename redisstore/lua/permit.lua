-- The permit script (Store.Acquire, Release and Extend): a key's
-- concurrency limit is one sorted set, a member per holder, scored by the
-- instant (µs on Redis' clock) its permit expires. A member scored at or
-- before now has expired: it counts for nothing, and any call may drop
-- it. The key expires with its latest permit, so a holder that dies
-- leaks nothing: its permit stops counting at its expiry, and the key
-- goes when the last one has.
--
-- Needs now and base (clock.lua) and int, ms_at (arith.lua).
--
-- KEYS[1]: the key. ARGV from ARGV[base]:
--   'acquire', holder, max, ttl_us
--       drop the expired members; when fewer than max remain and holder
--       is not among them, add holder expiring ttl_us from now.
--   'release', holder
--       remove holder's member.
--   'extend', holder, ttl_us
--       when holder's member is there and has not expired, make it
--       expire ttl_us from now.
-- Reply: now, then
--   acquire: acquired (0|1), held (after the call), retry_after_us (not
--            acquired: until the soonest expiry; else 0)
--   release: 1 when holder held an unexpired permit, else 0
--   extend:  1 when extended, else 0 (nothing changed)
-- A key holding another type fails with Redis' WRONGTYPE before any
-- write.

local call, tonumber = redis.call, tonumber
local key, op, holder = KEYS[1], ARGV[base], ARGV[base + 1]

-- expire_with_latest sets the key's expiry to its latest permit's, in ms
-- rounded up: the key lives exactly as long as a permit in it can count
-- (an empty set is no key already).
local function expire_with_latest()
  local last = call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then call('PEXPIREAT', key, ms_at(tonumber(last[2]))) end
end

if op == 'acquire' then
  local max, ttl = tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3])
  call('ZREMRANGEBYSCORE', key, '-inf', int(now))
  local held = call('ZCARD', key)
  if held < max and not call('ZSCORE', key, holder) then
    call('ZADD', key, int(now + ttl), holder)
    expire_with_latest()
    return {now, 1, held + 1, 0}
  end
  local first = call('ZRANGE', key, 0, 0, 'WITHSCORES')
  local retry = 0
  if first[2] then retry = tonumber(first[2]) - now end
  return {now, 0, held, retry}
end

if op == 'release' then
  local exp = call('ZSCORE', key, holder)
  if not exp then return {now, 0} end
  call('ZREM', key, holder)
  call('ZREMRANGEBYSCORE', key, '-inf', int(now))
  expire_with_latest()
  if tonumber(exp) > now then return {now, 1} end
  return {now, 0}
end

if op == 'extend' then
  local ttl = tonumber(ARGV[base + 2])
  local exp = call('ZSCORE', key, holder)
  if not exp or tonumber(exp) <= now then return {now, 0} end
  call('ZADD', key, int(now + ttl), holder)
  expire_with_latest()
  return {now, 1}
end

error('ratewarden: unknown permit operation ' .. tostring(op))
