-- cleanup: removes users whose heartbeat stopped, and active entries past
-- their expiry, a bounded batch of each per call.
--
-- KEYS[1] waiting ZSET, KEYS[2] heartbeat ZSET,
-- KEYS[3] credential HASH (admitted users only), KEYS[4] active ZSET,
-- KEYS[5] prequeue ZSET (placed pre-queue users keep their arrival there),
-- KEYS[6] admission HASH (counts the removals: see `moved` in lib.lua)
-- ARGV[1] batch size, ARGV[2] heartbeat timeout (ms)
--
-- Returns {removed_waiting, removed_active}.
local batch, timeout = tonumber(ARGV[1]), tonumber(ARGV[2])
if #KEYS ~= 6 or #ARGV ~= 2 or not batch or batch < 1 or not timeout or timeout < 1 then
  return redis.error_reply('ERR waitgate cleanup: bad arguments')
end
local now_ms = math.floor(now_us() / 1000)

-- A heartbeat is the time by which its user's next poll is due (see
-- `heartbeats` in lib.lua): those more than `timeout` past it. A poll moves
-- it in its own atomic step, so a user who just polled is never in this
-- range.
local stale = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. int(now_ms - timeout),
  'LIMIT', 0, batch)
local removed = 0
in_chunks(stale, function(...)
  removed = removed + redis.call('ZREM', KEYS[1], ...)
  redis.call('ZREM', KEYS[5], ...)
end)
moved(KEYS[6], removed)
-- They are the first #stale heartbeats by rank: removing that range walks the
-- head of the skiplist once, rather than looking each member up again.
if #stale > 0 then
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, #stale - 1)
end

local expired = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', int(now_ms), 'LIMIT', 0, batch)
in_chunks(expired, function(...)
  redis.call('ZREM', KEYS[4], ...)
  redis.call('HDEL', KEYS[3], ...)
end)

return {#stale, #expired}
