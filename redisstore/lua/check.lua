-- The check script: decides a list of checks, one after the other, each
-- all-or-nothing over its limits (run, in decide.lua).
--
-- Needs now and base (clock.lua), memo (arith.lua), and out, head, run
-- and key_state (decide.lua).
--
-- ARGV, from ARGV[base], is the checks, each its head ("cost mode m",
-- head) and its m limits (one argument each, limit in algorithms.lua);
-- KEYS holds one key per limit, in the same order.
--
-- Reply: now, then per limit of every check
--   allowed (0|1), remaining, retry_after_us, reset_after_us
-- An admission has no retry, so a reservation admitted ahead of time
-- carries its delay (Result.Delay) in the retry_after_us of each limit.
-- A check whose keys hold another type or a malformed state has allowed -1
-- on its first limit (and zeros elsewhere): it fails alone. Any other error
-- (Redis refusing writes: OOM, READONLY, MISCONF) fails the whole call.
-- Integers only: Redis truncates Lua numbers in replies.

-- The reply starts anew: a function library's out held the last call's.
for q = #out, 2, -1 do out[q] = nil end
out[1] = now

local ki, ai, nargs = 1, base, #ARGV
while ai <= nargs do
  local h = memo[ARGV[ai]] or head(ARGV[ai])
  local m = h.m
  ai = ai + 1
  local o = #out
  local ok, e = pcall(run, o, h, ai, ki)
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
  ai, ki = ai + m, ki + m
end
return out
