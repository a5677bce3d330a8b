-- sweep: cleanup with the look at each candidate made by the instance, in
-- plain commands (see `sweep` in src/store/mod.rs): this script takes out
-- the users the instance found stale, after checking each again, and moves
-- on in the bucket it read; it also removes active entries past their
-- expiry, and names the next bucket to read.
--
-- The instance reads a bucket's candidates with LRANGE (they stay in the
-- list) and their heartbeats with HMGET. Nothing is lost if it stops in
-- between: the candidates are dropped from the list only here, once their
-- stale users are out. Two instances that read the same candidates both
-- send their stale: the second finds them gone, and the list as the first
-- left it (its length changed), so it drops nothing more.
--
-- KEYS as cleanup.lua's: [1] waiting ZSET, [2] heartbeat ZSET (of earlier
-- versions), [3] credential HASH, [4] active ZSET, [5] prequeue ZSET,
-- [6] admission HASH, [7] due HASH, [8] dues ZSET
-- ARGV[1] batch size (active entries), ARGV[2] heartbeat timeout (ms),
-- ARGV[3] the bucket the instance read (its end as stored; '' for none),
-- ARGV[4] the bucket's length when read, ARGV[5] how many candidates it
-- read from its start, ARGV[6..] the users among them it found stale, each
-- once (at most 10,000)
--
-- Returns {removed_waiting, removed_active, next_bucket, next_length,
-- cutoff}: the next bucket past the timeout ('' for none), how many
-- candidates it holds, and the time (ms) before which a heartbeat is past
-- the timeout; or {-1} while an earlier version's heartbeats exist (then
-- cleanup.lua does the whole work, reading both).
local batch, timeout = tonumber(ARGV[1]), tonumber(ARGV[2])
local length, read = tonumber(ARGV[4]), tonumber(ARGV[5])
if #KEYS ~= 8 or #ARGV < 5 or #ARGV > 10005 or not batch or batch < 1 or not timeout
    or timeout < 1 or not length or not read or read < 0 or read > length then
  return redis.error_reply('ERR waitgate sweep: bad arguments')
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {-1}
end
local now_ms = math.floor(now_us() / 1000)
local cutoff = now_ms - timeout

local removed = 0
if ARGV[3] ~= '' then
  -- Stale still: a heartbeat below the cutoff (one that polled since has a
  -- later one; one with none has left). As cleanup.lua reads it.
  local stale = {}
  for first = 6, #ARGV, 500 do
    local last = math.min(first + 499, #ARGV)
    local hashed = redis.call('HMGET', KEYS[7], unpack(ARGV, first, last))
    for i = first, last do
      local value = hashed[i - first + 1]
      if value then
        local colon = string.find(value, ':', 1, true)
        local due = tonumber(colon and string.sub(value, 1, colon - 1) or value) or 0
        if due < cutoff then
          stale[#stale + 1] = ARGV[i]
        end
      end
    end
  end
  if #stale > 0 then
    in_chunks(stale, function(...) redis.call('HDEL', KEYS[7], ...) end)
    removed = remove_waiting(KEYS[1], KEYS[5], KEYS[6], stale)
  end
  -- The candidates read go, unless someone else moved the bucket on since.
  local list = KEYS[8] .. ':' .. ARGV[3]
  if redis.call('LLEN', list) == length then
    redis.call('LTRIM', list, read, -1)
  end
  if redis.call('EXISTS', list) == 0 then
    redis.call('ZREM', KEYS[8], ARGV[3])
  end
end

local expired = expire_active(KEYS[4], KEYS[3], now_ms, batch)
local ends = past_bucket(KEYS[8], cutoff)
if not ends then
  return {removed, expired, '', 0, cutoff}
end
return {removed, expired, ends, redis.call('LLEN', KEYS[8] .. ':' .. ends), cutoff}
