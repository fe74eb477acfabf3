-- The lease script (package lease): a replica takes a batch of a key's
-- units in one atomic step, or gives unused fixed-window units back. It
-- keeps no state of its own: it reads and writes the state check.lua
-- keeps, through the same loaders and algorithms, so leases and plain
-- checks share one count, one format and one expiry.
--
-- Needs now and base (clock.lua), read_limit (algorithms.lua), and
-- new_state, load_fixed and save_fixed (state.lua).
--
-- KEYS[1]: the key. ARGV from ARGV[base]:
--   'take', a limit (one argument, read_limit), need, want
--       fixed_window or token_bucket, 1 <= need <= want. Two checks at the
--       one instant now: a verdict for cost need; if it admits, a check
--       of cost min(want, remaining) that consumes.
--   'give', window_start_us, units, period_us
--       fixed_window only: take units back off the count of the window
--       that starts at window_start_us (of the period period_us), if the
--       key still holds that window; never below 0; the expiry stays as
--       it is.
--
-- Reply to take: now, granted, remaining, retry_after_us, reset_after_us,
-- due_us. granted 0: nothing was taken, and the rest is the verdict for
-- need. Otherwise the rest is the consuming check's, and due_us is the
-- verdict's reset_after: a token bucket's TAT before the take, the instant
-- from which the leased units fall due one emission interval apart.
-- Reply to give: now, units given back.

local key, op = KEYS[1], ARGV[base]

if op == 'give' then
  local ws, units, P = tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3])
  local st = new_state()
  load_fixed(st, key, P)
  if st.start ~= ws or st.curr == 0 then return {now, 0} end
  if units > st.curr then units = st.curr end
  save_fixed(key, st.curr - units, ws, P, true) -- the expiry stays
  return {now, units}
end

local load, decide, rate, P, cap, code = read_limit(base + 1)
if code ~= '1' and code ~= '2' then
  error('ratewarden: leases need fixed_window or token_bucket, got code ' .. tostring(code))
end
local need, want = tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3])
local st = new_state()
load(st, key, P)
local ok, rem, retry, reset = decide(st, key, rate, P, cap, need, false)
if ok == 0 then return {now, 0, rem, retry, reset, 0} end
local take, due = want, reset
if take > rem then take = rem end
local _, left, _, after = decide(st, key, rate, P, cap, take, true)
return {now, take, left, 0, after, due}
