-- samples: the scores at some ranks of the waiting set, from which the
-- instances derive ranks far back (src/store/ranks.rs); read-only. A sample
-- of a million users is taken in steps of this, each a bounded call.
--
-- KEYS[1] waiting ZSET, KEYS[2] admission HASH (see `moved` in lib.lua)
-- ARGV[1..] ranks, ascending, 1 to 500
--
-- Returns {epoch, total, moved, size, score at each rank below size ...}:
-- the counters as of this call, which every score of it shares.
local n = #ARGV
if #KEYS ~= 2 or n < 1 or n > 500 then
  return redis.error_reply('ERR waitgate samples: bad arguments')
end
local c = redis.call('HMGET', KEYS[2], 'epoch', 'total', 'moved')
local size = redis.call('ZCARD', KEYS[1])
local out = {tonumber(c[1]) or 0, tonumber(c[2]) or 0, tonumber(c[3]) or 0, size}
for i = 1, n do
  local rank = tonumber(ARGV[i])
  if not rank or rank < 0 or rank >= size then
    break
  end
  local at = redis.call('ZRANGE', KEYS[1], rank, rank, 'WITHSCORES')
  out[#out + 1] = tonumber(at[2])
end
return out
