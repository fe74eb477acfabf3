-- The clock: "now" is Redis' own TIME in microseconds, so every replica
-- decides on one clock. The checks start at ARGV[base]. (The differential
-- test swaps this preamble for one that reads now from ARGV[1].)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local base = 1
