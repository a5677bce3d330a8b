-- admit: the global admission gate. Moves up to a batch of users from the
-- head of waiting to active, at most once per window, whichever waitgate
-- instance calls first.
--
-- KEYS[1] waiting ZSET, KEYS[2] heartbeat ZSET, KEYS[3] active ZSET,
-- KEYS[4] admission HASH: window (last decided window), rate (average users
--         admitted per window), admitted (last batch), total, at (ms)
-- KEYS[5] credential HASH: userId -> arrival, for each admitted user, so
--         that the token exchange can tell this registration's credential
--         from an earlier one's
-- ARGV[1] interval (ms): windows are floor(TIME / interval)
-- ARGV[2] batch size
-- ARGV[3] active TTL (ms)
-- ARGV[4] max active (0 = no cap)
--
-- Returns {admitted, window, why, now_ms}: why = 0 decided now, 1 this
-- window was already decided (by any instance), 2 nobody waits, 3 the
-- max-active cap left no room. now_ms lets the caller sleep until the next
-- window by Redis's clock rather than its own.
local interval, batch = tonumber(ARGV[1]), tonumber(ARGV[2])
local ttl, max_active = tonumber(ARGV[3]), tonumber(ARGV[4])
if #KEYS ~= 5 or #ARGV ~= 4 or not interval or interval < 1 or not batch or batch < 1
    or not ttl or ttl < 1 or not max_active or max_active < 0 then
  return redis.error_reply('ERR waitgate admit: bad arguments')
end

local now_ms = math.floor(now_us() / 1000)
local window = math.floor(now_ms / interval)
local gate = redis.call('HMGET', KEYS[4], 'window', 'rate')
-- One decision per window: N instances, or a tick that comes late, can never
-- admit more than one batch in a window.
if (tonumber(gate[1]) or -1) >= window then
  return {0, window, 1, now_ms}
end
-- An empty queue does not use up the window, so the first arrival after a
-- quiet spell is admitted at the next tick rather than the next window.
if redis.call('ZCARD', KEYS[1]) == 0 then
  return {0, window, 2, now_ms}
end

local room = batch
if max_active > 0 then
  local live = redis.call('ZCOUNT', KEYS[3], '(' .. int(now_ms), '+inf')
  room = math.max(0, math.min(room, max_active - live))
end

local admitted = 0
if room > 0 then
  -- ZPOPMIN takes the head in FIFO order and removes it in the same step,
  -- so a user is in exactly one of the two sets at any time.
  local popped = redis.call('ZPOPMIN', KEYS[1], room)
  local expiry = int(now_ms + ttl)
  local users, scored, arrivals = {}, {}, {}
  for i = 1, #popped, 2 do
    users[#users + 1] = popped[i]
    scored[#scored + 1] = expiry
    scored[#scored + 1] = popped[i]
    arrivals[#arrivals + 1] = popped[i]
    arrivals[#arrivals + 1] = int(tonumber(popped[i + 1]))
  end
  admitted = #users
  in_chunks(scored, function(...) redis.call('ZADD', KEYS[3], ...) end)
  in_chunks(users, function(...) redis.call('ZREM', KEYS[2], ...) end)
  in_chunks(arrivals, function(...) redis.call('HSET', KEYS[5], ...) end)
end

-- The observed rate, for wait estimates: an average of users admitted per
-- window. A window where the queue ran short says nothing about the rate,
-- so it is left out.
local rate = tonumber(gate[2])
if admitted == room then
  if rate then
    rate = rate + 0.3 * (admitted - rate)
  else
    rate = admitted
  end
end
local record = {'window', int(window), 'admitted', admitted, 'at', int(now_ms)}
if rate then
  record[#record + 1] = 'rate'
  record[#record + 1] = string.format('%.4f', rate)
end
redis.call('HSET', KEYS[4], unpack(record))
redis.call('HINCRBY', KEYS[4], 'total', admitted)

if room == 0 then
  return {0, window, 3, now_ms}
end
return {admitted, window, 0, now_ms}
