-- admit: the global admission gate. Moves up to a batch of users from the
-- head of waiting to active, at most once per window, whichever waitgate
-- instance calls first. At a scheduled open it first places the pre-queue
-- in the waiting queue, one bounded step per call.
--
-- KEYS[1] waiting ZSET, KEYS[2] heartbeat ZSET, KEYS[3] active ZSET,
-- KEYS[4] admission HASH: window (last decided window), next (ms: no
--         decision before this), rate (average users admitted per window),
--         admitted (last batch), total, at (ms)
-- KEYS[5] credential HASH: userId -> arrival, for each admitted user, so
--         that the token exchange can tell this registration's credential
--         from an earlier one's
-- KEYS[6] control HASH (live settings and the event, see lib.lua)
-- KEYS[7] prequeue ZSET (userId -> arrival)
-- KEYS[8] due HASH, KEYS[9] dues ZSET (KEYS[2] and these: see `heartbeats`
--         in lib.lua), KEYS[10] spent ZSET (after a loss of state, each
--         admitted registration is marked spent: see lua/reseat.lua)
-- ARGV[1] interval (ms): windows are floor(TIME / interval)
-- ARGV[2] batch size
-- ARGV[3] active TTL (ms)
-- ARGV[4] max active (0 = no cap)
--         (ARGV[1], [2] and [4] as configured; the control hash may
--         override each)
-- ARGV[5] a fresh random seed (hex): used only if this call starts placing
--         a pre-queue, and then recorded for audit
-- ARGV[6] pre-queued users placed per call (bounds the call's Redis time)
-- ARGV[7] heartbeat timeout (ms), ARGV[8], ARGV[9] the bounds of the poll
--         advice (ms): a placed user's heartbeat gives them the longest
--         advice and the timeout from the open to show up
-- ARGV[10], ARGV[11] the operator's changes (the control HASH's version)
--         and the users admitted in all (the admission HASH's total) the
--         instance has seen: a Redis that has fewer lost state since (a
--         failover to a replica that was behind), and nobody is admitted
--         until the instance has written back what it knows
--
-- Returns {admitted, window, why, now_ms, next_ms}, and when why is 0 the
-- users admitted in all, the two frontiers and how many of this call's
-- users were admitted out of order (after someone behind them) too, then
-- each admitted
-- user's wait from arrival (the pre-queue arrival for a placed pre-queue
-- user) to now, in ms (at most a batch of numbers, once a window): why = 0 decided now,
-- 1 this window was already decided (by any instance), 2 nobody waits,
-- 3 the max-active cap left no room, 4 admission is paused, 5 the queue has
-- not opened yet, 6 placed a step of the pre-queue (call again at once),
-- 7 the queue's state is missing (no incarnation: see `read_control` in
-- lib.lua), 8 Redis has less than the instance saw (7 and 8 write nothing),
-- 9 the queue's state was lost and its waiting users are still coming back
-- to be seated again (`rebuild_until`): nobody is admitted meanwhile,
-- 10 the queue is closed (control.lua's 'close'): nobody is admitted until
-- it reopens.
-- Codes: 0 decided, 1 already-decided, 2 empty, 3 at-capacity, 4 paused, 5 not-open,
-- Codes: 6 placing, 7 missing, 8 behind, 9 rebuilding, 10 closed
--
-- The gate also records the frontier: the highest waiting score admitted,
-- and of placed pre-queue users the highest pre-queue arrival; the arrival
-- of the last user admitted (last_arrival), and in out_of_order the users
-- admitted after someone behind them (a place seated again after a loss of
-- state, for one), which should stay 0: the fairness answer shows both. Admission
-- is first come, first served, so every place at or before it was admitted
-- or left (see lua/reseat.lua).
-- next_ms is when, by Redis's clock, a call may decide again, so the caller
-- sleeps by Redis's clock rather than its own.
local interval, batch = tonumber(ARGV[1]), tonumber(ARGV[2])
local ttl, max_active = tonumber(ARGV[3]), tonumber(ARGV[4])
local seed, step = ARGV[5], tonumber(ARGV[6])
local timeout, pmin, pmax = heartbeat_args(7)
local seen_version, seen_total = tonumber(ARGV[10]), tonumber(ARGV[11])
if #KEYS ~= 10 or #ARGV ~= 11 or not timeout or not interval or interval < 1 or not batch
    or batch < 1
    or not ttl or ttl < 1 or not max_active or max_active < 0
    or not string.match(seed, '^%x+$') or #seed > 64 or not step or step < 1
    or not seen_version or not seen_total then
  return redis.error_reply('ERR waitgate admit: bad arguments')
end

local now = now_us()
local now_ms = math.floor(now / 1000)
local control = read_control(KEYS[6])
if not control.incarnation then
  return {0, 0, 7, now_ms, now_ms}
end
if control.version < seen_version
    or (seen_total > 0 and (tonumber(redis.call('HGET', KEYS[4], 'total')) or 0) < seen_total) then
  return {0, 0, 8, now_ms, now_ms}
end
interval = control.interval or interval
batch = control.batch or batch
max_active = control.max_active or max_active
local window = math.floor(now_ms / interval)
local phase = event_phase(control, now_ms)

if phase == 'scheduled' or phase == 'prequeue' then
  return {0, window, 5, now_ms, now_ms}
end

if phase == 'placing' then
  local base = start_placing(KEYS[6], KEYS[1], KEYS[7], KEYS[4], now)
  local c = redis.call('HMGET', KEYS[6], 'seed', 'cursor', 'shuffle', 'placed_count',
    'shuffle_bits', 'commitment')
  local cursor, count = c[2], tonumber(c[4]) or 0
  local shuffle = c[3] == '1'
  -- (44 for an open an earlier version started.)
  local bits, committed, queue = tonumber(c[5]) or 44, c[6] ~= false, queue_of(KEYS[6])
  if c[1] then
    seed = c[1]
  else
    -- The first step, by whichever instance gets here first: its seed is
    -- the one (for an event scheduled with no seed: before this version,
    -- or in arrival order).
    redis.call('HSET', KEYS[6], 'seed', seed)
  end
  local from = '-inf'
  if cursor then
    from = '(' .. cursor
  end
  local next = redis.call('ZRANGE', KEYS[7], from, '+inf', 'BYSCORE', 'LIMIT', 0, step,
    'WITHSCORES')
  local scored, placed = {}, {}
  for i = 1, #next, 2 do
    local user = next[i]
    -- A user an earlier event placed, still waiting, keeps that place.
    if not redis.call('ZSCORE', KEYS[1], user) then
      local offset = count
      if shuffle then
        offset = draw_offset(seed, bits, committed, queue, user)
      end
      count = count + 1
      scored[#scored + 1] = int(base + offset)
      scored[#scored + 1] = user
      placed[#placed + 1] = user
    end
  end
  if #placed > 0 then
    before_adding(KEYS[4], KEYS[1], now)
  end
  in_chunks(scored, function(...) redis.call('ZADD', KEYS[1], ...) end)
  -- Placed users land ahead of those who registered since the open began.
  counted(KEYS[4], 'added', #placed)
  local beats = heartbeats(KEYS[2], KEYS[8], KEYS[9], KEYS[1], now_ms, pmin, pmax)
  for i, user in ipairs(placed) do
    beats.set(user, pmax, tonumber(scored[2 * i - 1]))
  end
  beats.flush()
  local record = {'placed_count', count}
  if #next > 0 then
    record[#record + 1] = 'cursor'
    record[#record + 1] = next[#next]
  end
  if #next < 2 * step then
    record[#record + 1] = 'placed'
    record[#record + 1] = '1'
    record[#record + 1] = 'placed_at'
    record[#record + 1] = int(now_ms)
  end
  redis.call('HSET', KEYS[6], unpack(record))
  return {0, window, 6, now_ms, now_ms}
end

if control.closed then
  return {0, window, 10, now_ms, now_ms}
end
if control.paused then
  return {0, window, 4, now_ms, now_ms}
end
if now_ms < control.rebuild_until then
  return {0, window, 9, now_ms, now_ms}
end

local gate = redis.call('HMGET', KEYS[4], 'window', 'rate', 'next', 'window_ms')
local next_ms = (window + 1) * interval
-- One decision per window: N instances, or a tick that comes late, can never
-- admit more than one batch in a window. `next` is kept with the decision,
-- so that a window that changes length live still counts from the last one
-- (control.lua forgets `window` then: its number was of the old length).
local decided_until = tonumber(gate[3]) or 0
local last, last_ms = tonumber(gate[1]), tonumber(gate[4])
local decided = false
if last and last_ms and last_ms ~= interval then
  -- The config's length changed (a reload, or a restart): the last
  -- decision's window is compared as a time, and the next decision comes
  -- no later than the end of the window, at the new length, it was made
  -- in. Compared as numbers of different lengths, a longer window stopped
  -- admission for good.
  local start = last * last_ms
  decided = start >= window * interval
  decided_until = math.min(decided_until, (math.floor(start / interval) + 1) * interval)
elseif last and not last_ms and last > window then
  -- A number from the future, of another length, recorded before the
  -- length was: this window's end bounds it.
  decided_until = math.min(decided_until, next_ms)
elseif last then
  decided = last >= window
end
if decided or now_ms < decided_until then
  return {0, window, 1, now_ms, math.max(next_ms, decided_until)}
end
-- An empty queue does not use up the window, so the first arrival after a
-- quiet spell is admitted at the next tick rather than the next window.
if redis.call('ZCARD', KEYS[1]) == 0 then
  return {0, window, 2, now_ms, now_ms}
end

local room = batch
if max_active > 0 then
  local live = redis.call('ZCOUNT', KEYS[3], '(' .. int(now_ms), '+inf')
  -- Slots held for tokens issued before a loss of state (lua/recover.lua).
  if now_ms < control.held_until then
    live = live + control.held
  end
  room = math.max(0, math.min(room, max_active - live))
end

local admitted, waited, out_of_order = 0, {}, 0
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
  end
  -- A placed pre-queue user's credential names its pre-queue arrival, not
  -- its (shuffled) place; that entry goes with the admission.
  local prequeued = {}
  if #users > 0 and redis.call('EXISTS', KEYS[7]) == 1 then
    in_chunks(users, function(...)
      for _, score in ipairs(redis.call('ZMSCORE', KEYS[7], ...)) do
        prequeued[#prequeued + 1] = score
      end
      redis.call('ZREM', KEYS[7], ...)
    end)
  end
  for i = 1, #users do
    local arrival = tonumber(prequeued[i] or popped[2 * i])
    arrivals[#arrivals + 1] = users[i]
    arrivals[#arrivals + 1] = int(arrival)
    waited[i] = math.max(0, now_ms - math.floor(arrival / 1000))
  end
  local frontier = redis.call('HMGET', KEYS[4], 'frontier', 'frontier_prequeue')
  local highest, highest_prequeued = tonumber(frontier[1]) or 0, tonumber(frontier[2]) or 0
  for i = 1, #users do
    local place = tonumber(popped[2 * i])
    -- Admitted after someone behind them: out of arrival (or draw) order.
    if place < highest then
      out_of_order = out_of_order + 1
    end
    highest = math.max(highest, place)
    if prequeued[i] then
      highest_prequeued = math.max(highest_prequeued, tonumber(prequeued[i]))
    end
  end
  redis.call('HSET', KEYS[4], 'frontier', int(highest), 'frontier_prequeue',
    int(highest_prequeued))
  if #arrivals > 0 then
    redis.call('HSET', KEYS[4], 'last_arrival', arrivals[#arrivals])
  end
  if out_of_order > 0 then
    redis.call('HINCRBY', KEYS[4], 'out_of_order', out_of_order)
  end
  admitted = #users
  in_chunks(scored, function(...) redis.call('ZADD', KEYS[3], ...) end)
  heartbeats(KEYS[2], KEYS[8], KEYS[9], KEYS[1], now_ms, pmin, pmax).forget(users)
  in_chunks(arrivals, function(...) redis.call('HSET', KEYS[5], ...) end)
  if control.lost_at then
    -- (userId, arrival) pairs as spent wants them: (arrival, userId).
    local spent = {}
    for i = 1, #arrivals, 2 do
      spent[#spent + 1] = arrivals[i + 1]
      spent[#spent + 1] = arrivals[i]
    end
    in_chunks(spent, function(...) redis.call('ZADD', KEYS[10], 'GT', ...) end)
  end
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
local record = {'window', int(window), 'window_ms', interval, 'next', int(next_ms),
  'admitted', admitted, 'at', int(now_ms)}
if rate then
  record[#record + 1] = 'rate'
  record[#record + 1] = string.format('%.4f', rate)
end
redis.call('HSET', KEYS[4], unpack(record))
local total = redis.call('HINCRBY', KEYS[4], 'total', admitted)

if room == 0 then
  return {0, window, 3, now_ms, next_ms}
end
-- The deciding instance learns the gate's record at once: should Redis
-- lose it, that instance knows the latest (see lua/recover.lua).
local frontier = redis.call('HMGET', KEYS[4], 'frontier', 'frontier_prequeue')
local reply = {admitted, window, 0, now_ms, next_ms, total, tonumber(frontier[1]) or 0,
  tonumber(frontier[2]) or 0, out_of_order}
for i = 1, #waited do
  reply[#reply + 1] = waited[i]
end
return reply
