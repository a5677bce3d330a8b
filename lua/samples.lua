-- samples: the scores at some places of the waiting set, from which the
-- instances derive ranks far back (src/store/ranks.rs); read-only. A sample
-- of a million users is taken in steps of this, each a bounded call.
--
-- KEYS[1] waiting ZSET, KEYS[2] admission HASH (see `counted` in lib.lua)
-- ARGV[1..] places, ascending, 1 to 500, each counted with the users
--           admitted so far (`total`): the rank sampled is the place less
--           `total`, so that admissions between two steps leave no gap
--
-- Returns the counters and size as of this call, which every score of it
-- shares ({epoch, total, removed, added, joined, size}, see
-- `rank_counters`), then the score at each place's rank below the size
-- (-1 for a place admitted already).
local n = #ARGV
if #KEYS ~= 2 or n < 1 or n > 500 then
  return redis.error_reply('ERR waitgate samples: bad arguments')
end
local out = rank_counters(KEYS[2], KEYS[1])
local total, size = out[2], out[6]
for i = 1, n do
  local rank = tonumber(ARGV[i])
  if not rank then
    return redis.error_reply('ERR waitgate samples: bad arguments')
  end
  rank = rank - total
  if rank >= size then
    break
  end
  if rank < 0 then
    -- Admitted already.
    out[#out + 1] = -1
  else
    out[#out + 1] = tonumber(redis.call('ZRANGE', KEYS[1], rank, rank, 'WITHSCORES')[2])
  end
end
return out
