-- The clock contract. Every ratewarden script is this preamble followed by
-- the parts script.go names, and those parts take two things from it and
-- nothing else from outside their own text:
--
--   now   the instant of this execution in integer microseconds since the
--         Unix epoch, from Redis' own TIME: every replica decides on the
--         one clock of the Redis that holds the key, and Remaining,
--         RetryAfter and ResetAfter are measured on it too.
--   base  the index in ARGV of the script's first argument of its own.
--
-- No part reads the time any other way. The differential and model tests
-- assemble the very same parts after a preamble that takes now from
-- ARGV[1] and sets base to 2 (testClockLua in diff_test.go).
local now, base
do
  local t = redis.call('TIME')
  now, base = tonumber(t[1]) * 1000000 + tonumber(t[2]), 1
end
