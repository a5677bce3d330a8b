-- cleanup: removes users whose heartbeat stopped, and active entries past
-- their expiry, a bounded batch of each per call.
--
-- KEYS[1] waiting ZSET, KEYS[2] heartbeat ZSET (of earlier versions),
-- KEYS[3] credential HASH (admitted users only), KEYS[4] active ZSET,
-- KEYS[5] prequeue ZSET (placed pre-queue users keep their arrival there),
-- KEYS[6] admission HASH (counts the removals: see `counted` in lib.lua),
-- KEYS[7] due HASH, KEYS[8] dues ZSET (see `heartbeats` in lib.lua),
-- KEYS[9] numbering HASH, KEYS[10] marks STRING, KEYS[11] arrivals STRING
-- (see `marks` in lib.lua)
-- ARGV[1] batch size, ARGV[2] heartbeat timeout (ms), ARGV[3] outage grace
-- (ms: see `outage_cutoff` in lib.lua)
--
-- Returns {removed_waiting, removed_active, more}: more is 1 when silent
-- users may be left that this call had no room to look at.
local batch, timeout, grace = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if #KEYS ~= 11 or #ARGV ~= 3 or not batch or batch < 1 or not timeout or timeout < 1
    or not grace or grace < 0 then
  return redis.error_reply('ERR waitgate cleanup: bad arguments')
end
local now_ms = math.floor(now_us() / 1000)
-- A heartbeat is the time by which its user's next poll is due (see
-- `heartbeats` in lib.lua): those more than `timeout` past it, outages not
-- counted (see `outage_cutoff`). A poll writes it in its own atomic step,
-- so a user who just polled is never below the cutoff.
local cutoff = outage_cutoff(KEYS[6], now_ms, timeout, grace)
local legacy = redis.call('EXISTS', KEYS[2]) == 1

-- The candidates: the users of the buckets that ended `timeout` ago, up to
-- a batch of them. Every heartbeat that is still in such a bucket is below
-- the cutoff.
local candidates, more = {}, 0
while #candidates < batch do
  local ends = past_bucket(KEYS[8], cutoff)
  if not ends then
    break
  end
  local list = KEYS[8] .. ':' .. ends
  local users = redis.call('LPOP', list, batch - #candidates)
  if redis.call('EXISTS', list) == 0 then
    redis.call('ZREM', KEYS[8], ends)
  end
  for _, user in ipairs(users or {}) do
    candidates[#candidates + 1] = user
  end
end
if #candidates >= batch then
  more = 1
end
-- And a batch of the heartbeats earlier versions wrote, as old: their
-- entries go, and what they said is kept here for the check below.
local was_due = {}
if legacy then
  local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. int(cutoff), 'WITHSCORES',
    'LIMIT', 0, batch)
  -- The first entries by rank: removing that range walks the head of the
  -- skiplist once.
  if #old > 0 then
    redis.call('ZREMRANGEBYRANK', KEYS[2], 0, #old / 2 - 1)
  end
  if #old == 2 * batch then
    more = 1
  end
  for i = 1, #old, 2 do
    candidates[#candidates + 1] = old[i]
    was_due[old[i]] = tonumber(old[i + 1])
  end
end

-- Silent: no heartbeat at or past the cutoff in either place (a user with
-- none at all has left already, or was admitted). Those who polled since
-- have a later candidate too.
local stale, seen, known = {}, {}, {}
for i = 1, #candidates, 500 do
  local last = math.min(i + 499, #candidates)
  local hashed = redis.call('HMGET', KEYS[7], unpack(candidates, i, last))
  if legacy then
    local old = redis.call('ZMSCORE', KEYS[2], unpack(candidates, i, last))
    for j = 1, last - i + 1 do
      local user = candidates[i + j - 1]
      local due = parse_heartbeat(hashed[j])
      local was = tonumber(old[j]) or was_due[user]
      if not seen[user] and (due or was) and (due or 0) < cutoff and (was or 0) < cutoff then
        stale[#stale + 1] = user
      end
      seen[user] = true
    end
  else
    -- The look at each candidate of every batch: only the due part of the
    -- heartbeat is read (as parse_heartbeat reads it), and only the stale
    -- are remembered (a user filed twice is stale twice or not at all).
    -- Their heartbeats go at once, while the lookup just made has them in
    -- the CPU's cache (about 5% of a call of 500, measured at a million).
    local these, values = {}, {}
    for j = 1, last - i + 1 do
      local value = hashed[j]
      if value then
        local colon = string.find(value, ':', 1, true)
        local due = tonumber(colon and string.sub(value, 1, colon - 1) or value) or 0
        local user = candidates[i + j - 1]
        if due < cutoff and not seen[user] then
          these[#these + 1], values[#values + 1] = user, value
          seen[user] = true
        end
      end
    end
    -- (A numbered user whose mark is fresh keeps the HASH's heartbeat,
    -- which holds the number: the scan of the marks looks at them.)
    these = stale_by_marks(KEYS[9], KEYS[10], these, values, now_ms, cutoff, known)
    if #these > 0 then
      redis.call('HDEL', KEYS[7], unpack(these))
      for _, user in ipairs(these) do
        stale[#stale + 1] = user
      end
    end
  end
end

-- The stale who still wait go from waiting (see `remove_waiting`).
local removed = remove_waiting(KEYS[1], KEYS[5], KEYS[6], stale, {KEYS[9], KEYS[10], KEYS[11]},
  known)
if legacy then
  in_chunks(stale, function(...)
    redis.call('HDEL', KEYS[7], ...)
    redis.call('ZREM', KEYS[2], ...)
  end)
end

return {removed, expire_active(KEYS[4], KEYS[3], now_ms, batch), more}
