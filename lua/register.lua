-- register: put a user at the tail of the waiting queue, once.
--
-- KEYS[1] waiting ZSET   (userId -> arrival order, microseconds)
-- KEYS[2] heartbeat ZSET (userId -> last sign of life, ms)
-- KEYS[3] credential HASH (userId -> SHA-256 of the queueCredential)
-- KEYS[4] active ZSET    (userId -> active-state expiry, ms)
-- ARGV[1] userId
-- ARGV[2] SHA-256 digest of a fresh queueCredential (32 raw bytes)
--
-- Returns {1, rank}   registered now (rank = users ahead)
--         {2, rank}   already waiting: place kept, credential untouched
--         {3, expiry} already active until expiry (ms)
if #KEYS ~= 4 or #ARGV ~= 2 or #ARGV[1] == 0 or #ARGV[1] > 128 or #ARGV[2] ~= 32 then
  return redis.error_reply('ERR waitgate register: bad arguments')
end
local user, digest = ARGV[1], ARGV[2]
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)

local rank = redis.call('ZRANK', KEYS[1], user)
if rank then
  -- Registering again is a sign of life too.
  redis.call('ZADD', KEYS[2], string.format('%.0f', now_ms), user)
  return {2, rank}
end

local expiry = redis.call('ZSCORE', KEYS[4], user)
if expiry and tonumber(expiry) > now_ms then
  return {3, tonumber(expiry)}
end

-- Strict FIFO with no ties: the score is the arrival time in microseconds,
-- bumped past the current tail when two arrive in the same microsecond or
-- the clock steps back. Scores stay below 2^53, so doubles hold them exactly.
local score = now_us
local tail = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if tail[2] and tonumber(tail[2]) >= score then
  score = tonumber(tail[2]) + 1
end

if expiry then
  -- An active state that ran out but was not cleaned up yet.
  redis.call('ZREM', KEYS[4], user)
end
redis.call('ZADD', KEYS[1], string.format('%.0f', score), user)
redis.call('ZADD', KEYS[2], string.format('%.0f', now_ms), user)
redis.call('HSET', KEYS[3], user, digest)
return {1, redis.call('ZCARD', KEYS[1]) - 1}
