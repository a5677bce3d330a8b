-- token: is this user active, and is the credential of the registration that
-- was admitted? Read-only: loaded with the `no-writes` flag.
--
-- waitgate has already checked the credential's MAC (src/queue/credential.rs);
-- it names the arrival of one registration.
--
-- KEYS[1] active ZSET (userId -> active-state expiry, ms)
-- KEYS[2] credential HASH (userId -> arrival, written at admission)
-- ARGV[1] userId
-- ARGV[2] the arrival the credential names (decimal, microseconds)
--
-- Returns the active-state expiry (ms) when both hold, else 0: the two
-- failures share one answer.
if #KEYS ~= 2 or #ARGV ~= 2 or #ARGV[1] == 0 or #ARGV[1] > 128
    or not string.match(ARGV[2], '^%d+$') or #ARGV[2] > 16 then
  return redis.error_reply('ERR waitgate token: bad arguments')
end
local user, arrival = ARGV[1], tonumber(ARGV[2])
local now_ms = math.floor(now_us() / 1000)

local expiry = tonumber(redis.call('ZSCORE', KEYS[1], user) or '0')
local admitted = tonumber(redis.call('HGET', KEYS[2], user) or '-1')
if admitted == arrival and expiry > now_ms then
  return expiry
end
return 0
