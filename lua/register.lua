-- register: put a user at the tail of the waiting queue, once.
--
-- KEYS[1] waiting ZSET    (userId -> arrival order, microseconds)
-- KEYS[2] heartbeat ZSET  (userId -> last sign of life, ms)
-- KEYS[3] credential HASH (userId -> arrival; admitted users only)
-- KEYS[4] active ZSET     (userId -> active-state expiry, ms)
-- KEYS[5] admission HASH  (the gate's record, for the wait estimate)
-- ARGV[1] userId
-- ARGV[2] admission interval (ms), ARGV[3] admission batch size
--
-- Returns {1, rank, wait_ms, arrival}  registered now (rank = users ahead);
--                                      waitgate signs the arrival into the
--                                      queueCredential (src/queue/credential.rs)
--         {2, rank, wait_ms, 0}        already waiting: place kept
--         {3, expiry, 0, 0}            already active until expiry (ms)
--
-- A waiting user costs two sorted-set entries and nothing else.
local interval, batch = tonumber(ARGV[2]), tonumber(ARGV[3])
if #KEYS ~= 5 or #ARGV ~= 3 or #ARGV[1] == 0 or #ARGV[1] > 128
    or not interval or interval < 1 or not batch or batch < 1 then
  return redis.error_reply('ERR waitgate register: bad arguments')
end
local user = ARGV[1]
local now = now_us()
local now_ms = math.floor(now / 1000)

local rank = redis.call('ZRANK', KEYS[1], user)
if rank then
  -- Registering again is a sign of life too.
  redis.call('ZADD', KEYS[2], int(now_ms), user)
  return {2, rank, wait_estimate_ms(KEYS[5], rank, now_ms, interval, batch), 0}
end

local expiry = redis.call('ZSCORE', KEYS[4], user)
if expiry and tonumber(expiry) > now_ms then
  return {3, tonumber(expiry), 0, 0}
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
  -- An active state that ran out but was not cleaned up yet, with the
  -- credential entry of that earlier registration.
  redis.call('ZREM', KEYS[4], user)
  redis.call('HDEL', KEYS[3], user)
end
redis.call('ZADD', KEYS[1], int(score), user)
redis.call('ZADD', KEYS[2], int(now_ms), user)
rank = redis.call('ZCARD', KEYS[1]) - 1
return {1, rank, wait_estimate_ms(KEYS[5], rank, now_ms, interval, batch), score}
