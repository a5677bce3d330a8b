-- recheck: puts right the heartbeats an instance wrote far back without a
-- script (see `poll_many` in src/store/polls.rs) for users who, it found
-- after the write, had left the waiting set or joined it again at another
-- arrival between its read and its write. Only a heartbeat still as the
-- instance wrote it is touched: one written since (a new registration's,
-- a poll's) stays.
--
-- KEYS[1] waiting ZSET, KEYS[2] due HASH, KEYS[3] numbering HASH,
-- KEYS[4] marks STRING, KEYS[5] arrivals STRING (see `marks` in lib.lua)
-- ARGV pairs: a userId, then the heartbeat value the instance wrote
--
-- A user no longer waiting loses the heartbeat (it would keep a stray
-- entry until cleanup passed it); one waiting at another arrival gets the
-- same due time with that arrival (the rank far back is read off it), and
-- that registration's number, if it was given one.
-- Returns how many were put right.
if #KEYS ~= 5 or #ARGV < 2 or #ARGV % 2 ~= 0 or #ARGV > 1000 then
  return redis.error_reply('ERR waitgate recheck: bad arguments')
end
local fixed = 0
for i = 1, #ARGV, 2 do
  local user, written = ARGV[i], ARGV[i + 1]
  if redis.call('HGET', KEYS[2], user) == written then
    local score = redis.call('ZSCORE', KEYS[1], user)
    local colon = string.find(written, ':', 1, true)
    local _, arrival = parse_heartbeat(written)
    if not score then
      redis.call('HDEL', KEYS[2], user)
      fixed = fixed + 1
    elseif colon and arrival ~= tonumber(score) then
      local number = number_of({KEYS[3], KEYS[4], KEYS[5]}, score)
      redis.call('HSET', KEYS[2], user, string.sub(written, 1, colon) .. int(tonumber(score))
        .. (number and ':' .. int(number) or ''))
      fixed = fixed + 1
    end
  end
end
return fixed
