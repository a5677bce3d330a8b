-- rank: where a user stands; refreshes the heartbeat of a waiting user only.
--
-- KEYS[1] waiting ZSET, KEYS[2] heartbeat ZSET, KEYS[3] active ZSET
-- ARGV[1] userId
--
-- Returns {1, rank}   waiting, with rank users ahead; heartbeat refreshed
--         {3, expiry} active until expiry (ms)
--         {0, 0}      not queued: nothing is written
if #KEYS ~= 3 or #ARGV ~= 1 or #ARGV[1] == 0 or #ARGV[1] > 128 then
  return redis.error_reply('ERR waitgate rank: bad arguments')
end
local user = ARGV[1]
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local rank = redis.call('ZRANK', KEYS[1], user)
if rank then
  redis.call('ZADD', KEYS[2], string.format('%.0f', now_ms), user)
  return {1, rank}
end

local expiry = redis.call('ZSCORE', KEYS[3], user)
if expiry and tonumber(expiry) > now_ms then
  return {3, tonumber(expiry)}
end
return {0, 0}
