-- dropout: a user leaves, proving it with its queueCredential.
--
-- KEYS[1] waiting ZSET, KEYS[2] heartbeat ZSET, KEYS[3] credential HASH,
-- KEYS[4] active ZSET
-- ARGV[1] userId
-- ARGV[2] SHA-256 digest of the presented queueCredential (32 raw bytes)
--
-- Returns  1  removed from waiting (or active), heartbeat and credential
--          0  not queued: nothing is written
--         -1  credential does not match: nothing is written
if #KEYS ~= 4 or #ARGV ~= 2 or #ARGV[1] == 0 or #ARGV[1] > 128 or #ARGV[2] ~= 32 then
  return redis.error_reply('ERR waitgate dropout: bad arguments')
end
local user, digest = ARGV[1], ARGV[2]

local stored = redis.call('HGET', KEYS[3], user)
if not stored then
  return 0
end

if not same_digest(stored, digest) then
  return -1
end

redis.call('ZREM', KEYS[1], user)
redis.call('ZREM', KEYS[2], user)
redis.call('HDEL', KEYS[3], user)
-- An active user who leaves gives its slot back (it counts toward max-active).
redis.call('ZREM', KEYS[4], user)
return 1
