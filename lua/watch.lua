-- watch: every instance's look at a queue, once a second (see
-- src/background/watch.rs). It stamps the queue as seen, which is how an
-- outage is noticed and kept from counting against heartbeats (see
-- `outage_cutoff` in lib.lua); notices a failover; and reads what the
-- instance keeps in memory to write back should Redis lose the queue's
-- state (see lua/recover.lua).
--
-- KEYS[1] admission HASH, KEYS[2] control HASH, KEYS[3] active ZSET,
-- KEYS[4] spent ZSET (userId -> the latest arrival of theirs that may not
--         be seated again: see lua/reseat.lua), KEYS[5] prequeue ZSET
-- ARGV[1] heartbeat timeout (ms), ARGV[2] outage grace (ms), ARGV[3] how
--         long after a failover a registration it lost may be seated again
--         (ms: see lua/reseat.lua)
--
-- Returns {now_ms, incarnation, gap, incident, incident_at, incident_ms,
-- active, control, admission}:
--   incarnation  the queue's state's id ('' when there is none: Redis has
--                lost the state, or never had it; then nothing is written)
--   gap          the outage this call recorded (ms; 0 for none)
--   incident     the last incident recorded ('outage', 'failover',
--                'data_loss' or ''), when (ms) and how long (ms)
--   active       active users whose state has not run out
--   control      the control HASH, as field, value, ...
--   admission    the admission HASH's total, frontier, frontier_prequeue,
--                window, next, window_ms and rate, as field, value, ...
--                (those present)
local timeout, grace, reseat_ms = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if #KEYS ~= 5 or #ARGV ~= 3 or not timeout or timeout < 1 or not grace or grace < 0
    or not reseat_ms or reseat_ms < 0 then
  return redis.error_reply('ERR waitgate watch: bad arguments')
end
local now_ms = math.floor(now_us() / 1000)
local incarnation = redis.call('HGET', KEYS[2], 'incarnation')
if not incarnation then
  return {now_ms, '', 0, '', 0, 0, 0, {}, {}}
end

-- A failover: the server is a replica promoted since the last look (its
-- replication id changed, and it keeps its old one as a second).
local info = redis.call('INFO', 'replication')
local replid = string.match(info, 'master_replid:(%x+)')
local promoted = (tonumber(string.match(info, 'second_repl_offset:(%-?%d+)')) or -1) >= 0
local seen = redis.call('HGET', KEYS[1], 'replid')
local extra = {}
if replid and replid ~= seen then
  extra = {'replid', replid}
end
local _, gap = outage_cutoff(KEYS[1], now_ms, timeout, grace, extra)
if seen and replid and replid ~= seen and promoted then
  redis.call('HSET', KEYS[1], 'incident', 'failover', 'incident_at', int(now_ms))
  if gap == 0 then
    redis.call('HSET', KEYS[1], 'incident_ms', 0)
  end
  -- A replica may be promoted without the last writes it had not yet
  -- received: registrations made before now (and a second more, for a
  -- clock that lags the old master's) may be seated again for a while, if
  -- after the frontier as it stands.
  local frontier = redis.call('HMGET', KEYS[1], 'frontier', 'frontier_prequeue')
  redis.call('HSET', KEYS[2], 'lost_at', int(now_ms + 1000), 'reseat_until',
    int(now_ms + reseat_ms), 'lost_frontier', frontier[1] or '0', 'lost_frontier_prequeue',
    frontier[2] or '0')
end

local fields = {'total', 'frontier', 'frontier_prequeue', 'window', 'next', 'window_ms', 'rate',
  'out_of_order', 'last_arrival'}
local a = redis.call('HMGET', KEYS[1], 'incident', 'incident_at', 'incident_ms', unpack(fields))
local admission = {}
for i, field in ipairs(fields) do
  if a[i + 3] then
    admission[#admission + 1] = field
    admission[#admission + 1] = a[i + 3]
  end
end
-- A spent registration at or before the frontier was admitted or left
-- anyway: its mark is no longer needed (while no placed pre-queue waits,
-- whose arrivals are not their places).
if a[5] and redis.call('EXISTS', KEYS[4]) == 1 and redis.call('EXISTS', KEYS[5]) == 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', a[5])
end
local active = redis.call('ZCOUNT', KEYS[3], '(' .. int(now_ms), '+inf')
return {now_ms, incarnation, gap, a[1] or '', tonumber(a[2]) or 0, tonumber(a[3]) or 0,
  active, redis.call('HGETALL', KEYS[2]), admission}
