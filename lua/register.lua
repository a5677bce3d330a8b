-- register: put a user at the tail of the waiting queue, once.
--
-- KEYS[1] waiting ZSET    (userId -> arrival order, microseconds)
-- KEYS[2] heartbeat ZSET  (userId -> last sign of life, ms)
-- KEYS[3] credential HASH (userId -> SHA-256 of the queueCredential)
-- KEYS[4] active ZSET     (userId -> active-state expiry, ms)
-- KEYS[5] admission HASH  (the gate's record, for the wait estimate)
-- ARGV[1] userId
-- ARGV[2] SHA-256 digest of a fresh queueCredential (32 raw bytes)
-- ARGV[3] admission interval (ms), ARGV[4] admission batch size
--
-- Returns {1, rank, wait_ms}   registered now (rank = users ahead)
--         {2, rank, wait_ms}   already waiting: place kept, credential untouched
--         {3, expiry, 0}       already active until expiry (ms)
local interval, batch = tonumber(ARGV[3]), tonumber(ARGV[4])
if #KEYS ~= 5 or #ARGV ~= 4 or #ARGV[1] == 0 or #ARGV[1] > 128 or #ARGV[2] ~= 32
    or not interval or interval < 1 or not batch or batch < 1 then
  return redis.error_reply('ERR waitgate register: bad arguments')
end
local user, digest = ARGV[1], ARGV[2]
local now = now_us()
local now_ms = math.floor(now / 1000)

local rank = redis.call('ZRANK', KEYS[1], user)
if rank then
  -- Registering again is a sign of life too.
  redis.call('ZADD', KEYS[2], int(now_ms), user)
  return {2, rank, wait_estimate_ms(KEYS[5], rank, now_ms, interval, batch)}
end

local expiry = redis.call('ZSCORE', KEYS[4], user)
if expiry and tonumber(expiry) > now_ms then
  return {3, tonumber(expiry), 0}
end

-- Strict FIFO with no ties: the score is the arrival time in microseconds,
-- bumped past the current tail when two arrive in the same microsecond or
-- the clock steps back. Scores stay below 2^53, so doubles hold them exactly.
local score = now
local tail = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if tail[2] and tonumber(tail[2]) >= score then
  score = tonumber(tail[2]) + 1
end

if expiry then
  -- An active state that ran out but was not cleaned up yet.
  redis.call('ZREM', KEYS[4], user)
end
redis.call('ZADD', KEYS[1], int(score), user)
redis.call('ZADD', KEYS[2], int(now_ms), user)
redis.call('HSET', KEYS[3], user, digest)
rank = redis.call('ZCARD', KEYS[1]) - 1
return {1, rank, wait_estimate_ms(KEYS[5], rank, now_ms, interval, batch)}
