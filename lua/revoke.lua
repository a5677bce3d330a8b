-- revoke: ends a user's active state and refuses the user's tokens issued
-- until now, on every instance (an admin revocation, or an early release by
-- the backend).
--
-- KEYS[1] active ZSET, KEYS[2] credential HASH,
-- KEYS[3] revoked ZSET (userId -> revoked at, ms): the instances read it
--         every second, and get each entry pushed at once on ARGV[3]
-- ARGV[1] userId
-- ARGV[2] how long to remember a revocation (ms): the longest a token lives
-- ARGV[3] the channel to publish on, ARGV[4] the queue name
--
-- Returns {was_active, now_ms}.
local keep = tonumber(ARGV[2])
if #KEYS ~= 3 or #ARGV ~= 4 or #ARGV[1] == 0 or #ARGV[1] > 128 or not keep or keep < 1
    or #ARGV[3] == 0 or #ARGV[4] == 0 then
  return redis.error_reply('ERR waitgate revoke: bad arguments')
end
local user = ARGV[1]
local now_ms = math.floor(now_us() / 1000)

local expiry = tonumber(redis.call('ZSCORE', KEYS[1], user) or '0')
redis.call('ZREM', KEYS[1], user)
redis.call('HDEL', KEYS[2], user)
redis.call('ZADD', KEYS[3], int(now_ms), user)
-- Revocations older than any token can be are of no more use.
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. int(now_ms - keep))
redis.call('PUBLISH', ARGV[3], ARGV[4] .. '\n' .. user .. '\n' .. int(now_ms))
local active = 0
if expiry > now_ms then
  active = 1
end
return {active, now_ms}
