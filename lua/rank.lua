-- rank: where a user stands; refreshes the heartbeat of a waiting user only.
--
-- KEYS[1] waiting ZSET, KEYS[2] heartbeat ZSET, KEYS[3] active ZSET,
-- KEYS[4] admission HASH (for the wait estimate)
-- ARGV[1] userId
-- ARGV[2] admission interval (ms), ARGV[3] admission batch size
--
-- Returns {1, rank, wait_ms}   waiting, with rank users ahead; heartbeat refreshed
--         {3, expiry, 0}       active until expiry (ms)
--         {0, 0, 0}            not queued: nothing is written
local interval, batch = tonumber(ARGV[2]), tonumber(ARGV[3])
if #KEYS ~= 4 or #ARGV ~= 3 or #ARGV[1] == 0 or #ARGV[1] > 128
    or not interval or interval < 1 or not batch or batch < 1 then
  return redis.error_reply('ERR waitgate rank: bad arguments')
end
local user = ARGV[1]
local now_ms = math.floor(now_us() / 1000)

local rank = redis.call('ZRANK', KEYS[1], user)
if rank then
  redis.call('ZADD', KEYS[2], int(now_ms), user)
  return {1, rank, wait_estimate_ms(KEYS[4], rank, now_ms, interval, batch)}
end

local expiry = redis.call('ZSCORE', KEYS[3], user)
if expiry and tonumber(expiry) > now_ms then
  return {3, tonumber(expiry), 0}
end
return {0, 0, 0}
