-- token: is this user active, and does the credential match? Read-only:
-- loaded with the `no-writes` flag.
--
-- KEYS[1] active ZSET (userId -> active-state expiry, ms)
-- KEYS[2] credential HASH (userId -> SHA-256 of the queueCredential)
-- ARGV[1] userId
-- ARGV[2] SHA-256 digest of the presented queueCredential (32 raw bytes)
--
-- Returns the active-state expiry (ms) when both hold, else 0. The two
-- failures share one answer, and the comparison runs in full either way, so
-- neither the reply nor its timing tells which check failed.
if #KEYS ~= 2 or #ARGV ~= 2 or #ARGV[1] == 0 or #ARGV[1] > 128 or #ARGV[2] ~= 32 then
  return redis.error_reply('ERR waitgate token: bad arguments')
end
local user, digest = ARGV[1], ARGV[2]
local now_ms = math.floor(now_us() / 1000)

local expiry = tonumber(redis.call('ZSCORE', KEYS[1], user) or '0')
local stored = redis.call('HGET', KEYS[2], user) or ''

-- Compare even when the user is not active, so the time taken does not tell
-- which check failed.
local matches = same_digest(stored, digest)
if matches and expiry > now_ms then
  return expiry
end
return 0
