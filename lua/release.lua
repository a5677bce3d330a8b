-- release: gives back an instance's claim on a queue's cleanup pass (see
-- `Store::claim_sweep`), only if it still holds it: a claim another
-- instance has taken since is left alone.
--
-- KEYS[1] sweeper STRING
-- ARGV[1] the instance's id
--
-- Returns 1 if the claim was given back, 0 if it was not this instance's.
if #KEYS ~= 1 or #ARGV ~= 1 or #ARGV[1] == 0 then
  return redis.error_reply('ERR waitgate release: bad arguments')
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
