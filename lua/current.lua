-- current: is the registration a credential names the user's current one?
-- Read-only: loaded with the `no-writes` flag. Asked before a rank poll on
-- a queue with `require-credential`, so that the credential of an earlier
-- registration polls nobody's place.
--
-- waitgate has already checked the credential's MAC (src/queue_api/credential.rs);
-- it names the arrival of one registration.
--
-- KEYS[1] waiting ZSET, KEYS[2] prequeue ZSET, KEYS[3] credential HASH
-- ARGV[1] userId, ARGV[2] the arrival the credential names (microseconds)
--
-- Returns 1 the current registration (waiting, pre-queued or admitted),
-- 0 the user is not queued, -1 the user's current registration is another.
-- Codes: 1 current, 0 not-queued, -1 earlier
if #KEYS ~= 3 or #ARGV ~= 2 or #ARGV[1] == 0 or #ARGV[1] > 128
    or not string.match(ARGV[2], '^%d+$') or #ARGV[2] > 16 then
  return redis.error_reply('ERR waitgate current: bad arguments')
end
local found = registration_of(KEYS[1], KEYS[2], KEYS[3], ARGV[1], tonumber(ARGV[2]))
if found == 'earlier' then
  return -1
elseif found then
  return 1
end
return 0
