-- token: is this user active, and is the credential of the registration that
-- was admitted? Read-only: loaded with the `no-writes` flag.
--
-- waitgate has already checked the credential's MAC (src/queue_api/credential.rs);
-- it names the arrival of one registration.
--
-- KEYS[1] active ZSET (userId -> active-state expiry, ms)
-- KEYS[2] credential HASH (userId -> arrival, written at admission)
-- ARGV[1..] pairs: a userId, then the arrival its credential names (decimal,
--           microseconds); 1 to 250 pairs (concurrent exchanges for one
--           queue on one instance share a call)
--
-- Returns, for each pair in order, the active-state expiry (ms) when both
-- hold, else 0: the two failures share one answer.
local pairs_n = #ARGV / 2
if #KEYS ~= 2 or #ARGV < 2 or #ARGV % 2 ~= 0 or pairs_n > 250 then
  return redis.error_reply('ERR waitgate token: bad arguments')
end
for i = 1, #ARGV, 2 do
  if #ARGV[i] == 0 or #ARGV[i] > 128 or not string.match(ARGV[i + 1], '^%d+$')
      or #ARGV[i + 1] > 16 then
    return redis.error_reply('ERR waitgate token: bad arguments')
  end
end
local now_ms = math.floor(now_us() / 1000)

local out = {}
for i = 1, #ARGV, 2 do
  local user, arrival = ARGV[i], tonumber(ARGV[i + 1])
  local expiry = tonumber(redis.call('ZSCORE', KEYS[1], user) or '0')
  local admitted = tonumber(redis.call('HGET', KEYS[2], user) or '-1')
  if admitted == arrival and expiry > now_ms then
    out[#out + 1] = expiry
  else
    out[#out + 1] = 0
  end
end
return out
