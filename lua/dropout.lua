-- dropout: a user leaves, proving it with its queueCredential.
--
-- waitgate has already checked the credential's MAC (src/queue_api/credential.rs),
-- which names the arrival of one registration; this script checks that the
-- registration is still the user's current one.
--
-- KEYS[1] waiting ZSET, KEYS[2] heartbeat ZSET,
-- KEYS[3] credential HASH (userId -> arrival; admitted users only),
-- KEYS[4] active ZSET, KEYS[5] prequeue ZSET (userId -> arrival: pre-queued
--         users, and placed ones until admitted),
-- KEYS[6] admission HASH (counts and logs a departure: see `departed` in
--         lib.lua),
-- KEYS[7] due HASH (KEYS[2] and this: see `heartbeats` in lib.lua),
-- KEYS[8] spent ZSET (userId -> the latest arrival that may not be seated
--         again), KEYS[9] control HASH (when the state was last lost),
-- KEYS[10] numbering HASH, KEYS[11] marks STRING, KEYS[12] arrivals STRING
--         (see `marks` in lib.lua)
-- ARGV[1] userId
-- ARGV[2] the arrival the credential names (decimal, microseconds)
--
-- Returns  1  removed from waiting (or active), heartbeat and credential
--          0  not queued: nothing is written, but for the spent mark of a
--             registration that a loss of state took (see lua/reseat.lua)
--         -1  the credential is of an earlier registration: nothing is written
-- Codes: 1 removed, 0 not-queued, -1 earlier
--
-- A registration that left is marked spent, so that no loss of state can
-- bring it back.
if #KEYS ~= 12 or #ARGV ~= 2 or #ARGV[1] == 0 or #ARGV[1] > 128
    or not string.match(ARGV[2], '^%d+$') or #ARGV[2] > 16 then
  return redis.error_reply('ERR waitgate dropout: bad arguments')
end
local user, arrival = ARGV[1], tonumber(ARGV[2])
local function spend()
  redis.call('ZADD', KEYS[8], 'GT', ARGV[2], user)
end

local found = registration_of(KEYS[1], KEYS[5], KEYS[3], user, arrival)
if found == 'earlier' then
  return -1
end
if found == 'waiting' then
  local score = redis.call('ZSCORE', KEYS[1], user)
  if score then
    redis.call('ZREM', KEYS[1], user)
    departed(KEYS[6], {score})
    -- A numbered registration's mark goes with it: a poll far back that
    -- brings the number reads the mark alone. (The number, from the
    -- heartbeat; checked against the arrival, searched for without it.)
    local _, _, _, number = parse_heartbeat(redis.call('HGET', KEYS[7], user))
    clear_marks({KEYS[10], KEYS[11], KEYS[12]}, {score}, {number or false})
  end
  redis.call('ZREM', KEYS[2], user)
  redis.call('HDEL', KEYS[7], user)
  redis.call('ZREM', KEYS[5], user)
  spend()
  return 1
end

if not found then
  local lost_at = tonumber(redis.call('HGET', KEYS[9], 'lost_at'))
  if lost_at and arrival < lost_at * 1000 then
    spend()
  end
  return 0
end
-- An active user who leaves gives its slot back (it counts toward max-active).
redis.call('ZREM', KEYS[4], user)
redis.call('HDEL', KEYS[3], user)
return 1
