-- sweep: cleanup with the look at each candidate made by the instance, in
-- plain commands (see `sweep` in src/store/admission.rs): this script takes out
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
-- When the step before removed most of what it looked at (users leaving
-- in a crowd), the instance's look would only read again what this script
-- must read anyway: it then names the bucket alone, and the candidates are
-- read, checked and dropped here, in one step.
--
-- KEYS as cleanup.lua's: KEYS[1] waiting ZSET, KEYS[2] heartbeat ZSET (of
-- earlier versions), KEYS[3] credential HASH, KEYS[4] active ZSET,
-- KEYS[5] prequeue ZSET, KEYS[6] admission HASH, KEYS[7] due HASH,
-- KEYS[8] dues ZSET, KEYS[9] numbering HASH, KEYS[10] marks STRING,
-- KEYS[11] arrivals STRING
-- ARGV[1] batch size (active entries), ARGV[2] heartbeat timeout (ms),
-- ARGV[3] outage grace (ms: see `outage_cutoff` in lib.lua),
-- ARGV[4] the bucket the instance read (its end as stored; '' for none),
-- ARGV[5] the bucket's length when read ('' when the script is to read the
-- candidates itself), ARGV[6] how many candidates it read from its start
-- (or this script is to read, at most 10,000), ARGV[7..] the users among them it
-- found stale, each once (at most 10,000; none when the script reads)
--
-- Returns {removed_waiting, removed_active, next_bucket, next_length,
-- cutoff, looked, strays}: the next bucket past the timeout ('' for none),
-- how many candidates it holds, the time (ms) before which a heartbeat is
-- past the timeout (counted as `outage_cutoff` counts it), how many
-- candidates were looked at, by the instance or here, and how many
-- heartbeats with no place behind them went (see `still_stale`); or {-1}
-- while an earlier version's heartbeats exist (then cleanup.lua does the
-- whole work, reading both).
local batch, timeout, grace = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local bucket = ARGV[4]
local here = ARGV[5] == ''
local length, read = tonumber(ARGV[5]), tonumber(ARGV[6])
if #KEYS ~= 11 or #ARGV < 6 or #ARGV > 10006 or not batch or batch < 1 or not timeout
    or timeout < 1 or not grace or grace < 0 or not read or read < 0
    or read ~= math.floor(read)
    or (here and (#ARGV > 6 or bucket == '' or read > 10000))
    or (not here and (not length or read > length)) then
  return redis.error_reply('ERR waitgate sweep: bad arguments')
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {-1}
end
local now_ms = math.floor(now_us() / 1000)
local cutoff = outage_cutoff(KEYS[6], now_ms, timeout, grace)

-- The users of users[first..] whose heartbeat is stale still: below the
-- cutoff (one that polled since has a later one; one with none has left),
-- as cleanup.lua reads it; each once (a user filed twice in a bucket is
-- stale twice or not at all).
--
-- And the heartbeats among them that have no place behind them (strays:
-- a poll far back whose plain write reached a new master that never had
-- the user, see `poll_many` in src/store/polls.rs): every user with a
-- heartbeat is waiting, so these go, heartbeat only. A stray that keeps
-- polling keeps filing candidates, so one is looked at in every bucket.
local known = {}
local function still_stale(users, first)
  local stale, seen, fresh = {}, {}, {}
  for i = first, #users, 500 do
    local last = math.min(i + 499, #users)
    local hashed = redis.call('HMGET', KEYS[7], unpack(users, i, last))
    local these, values = {}, {}
    for j = i, last do
      local value, user = hashed[j - i + 1], users[j]
      if value and not seen[user] then
        seen[user] = true
        local colon = string.find(value, ':', 1, true)
        local due = tonumber(colon and string.sub(value, 1, colon - 1) or value) or 0
        if due < cutoff then
          these[#these + 1], values[#values + 1] = user, value
        else
          fresh[#fresh + 1] = user
        end
      end
    end
    -- A numbered user whose mark is fresh is not stale (nor a stray: the
    -- scan of the marks looks at them).
    for _, user in ipairs(stale_by_marks(KEYS[9], KEYS[10], these, values, now_ms, cutoff, known)) do
      stale[#stale + 1] = user
    end
  end
  local strays = {}
  for i = 1, #fresh, 500 do
    local last = math.min(i + 499, #fresh)
    local scores = redis.call('ZMSCORE', KEYS[1], unpack(fresh, i, last))
    for j = i, last do
      if not scores[j - i + 1] then
        strays[#strays + 1] = fresh[j]
      end
    end
  end
  return stale, strays
end

local removed, looked, strayed = 0, read, 0
if bucket ~= '' then
  local list = KEYS[8] .. ':' .. bucket
  local stale, strays
  if here then
    local candidates = read > 0 and redis.call('LRANGE', list, 0, read - 1) or {}
    looked = #candidates
    stale, strays = still_stale(candidates, 1)
    if looked > 0 then
      redis.call('LTRIM', list, looked, -1)
    end
  else
    stale, strays = still_stale(ARGV, 7)
  end
  if #stale > 0 then
    in_chunks(stale, function(...) redis.call('HDEL', KEYS[7], ...) end)
    removed = remove_waiting(KEYS[1], KEYS[5], KEYS[6], stale, {KEYS[9], KEYS[10], KEYS[11]},
      known)
  end
  if #strays > 0 then
    in_chunks(strays, function(...) redis.call('HDEL', KEYS[7], ...) end)
    strayed = #strays
  end
  -- The candidates the instance read go, unless someone else moved the
  -- bucket on since.
  if not here and redis.call('LLEN', list) == length then
    redis.call('LTRIM', list, read, -1)
  end
  if redis.call('EXISTS', list) == 0 then
    redis.call('ZREM', KEYS[8], bucket)
  end
end

local expired = expire_active(KEYS[4], KEYS[3], now_ms, batch)
local ends = past_bucket(KEYS[8], cutoff)
if not ends then
  return {removed, expired, '', 0, cutoff, looked, strayed}
end
return {removed, expired, ends, redis.call('LLEN', KEYS[8] .. ':' .. ends), cutoff, looked,
  strayed}
