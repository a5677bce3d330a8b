-- Shared helpers: waitgate prepends this file to every script in lua/ when it
-- loads them (see src/store/mod.rs), so each script reads as if these were
-- defined at its top.

-- Redis time, in milliseconds and microseconds. Every instance reads the same
-- clock, so they never disagree about windows, heartbeats or expiries.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Integers past 2^31 must be sent to Redis as text without an exponent.
local function int(n)
  return string.format('%.0f', n)
end

-- The expected wait (ms) of a user with `rank` users ahead, as a function
-- of rank (the gate is read once, for a whole batch of users).
--
-- The admission gate (admit.lua) records the last admitted window and an
-- average of users admitted per window, in the admission hash. The user is
-- admitted floor(rank / rate) windows after the next admission; the next
-- admission is due at once if this window has not admitted yet, else at the
-- start of the next window. With no record yet, the configured batch size is
-- the rate.
local function wait_estimator(admission_key, now_ms, interval_ms, batch)
  local gate = redis.call('HMGET', admission_key, 'window', 'rate')
  local last_window = tonumber(gate[1]) or -1
  local rate = tonumber(gate[2]) or batch
  if rate < 0.01 then
    rate = 0.01
  end
  local window = math.floor(now_ms / interval_ms)
  local first_ms = 0
  if last_window >= window then
    first_ms = (window + 1) * interval_ms - now_ms
  end
  return function(rank)
    return first_ms + math.floor(rank / rate) * interval_ms
  end, first_ms, rate
end

-- Ranks far back are derived by the instances from samples of the waiting
-- set (src/store/ranks.rs), corrected by two counters in the admission
-- HASH: `total`, the users admitted (always from the head, so ahead of
-- everyone still waiting), and `moved`, every other change that can move a
-- user's rank (a dropout, a cleanup removal, a placed pre-queue user), which
-- bounds how far a derived rank can be off. `epoch` changes when the waiting
-- set starts anew (empty, then a first user), so that samples of an earlier
-- set are never used for a new one.
local function moved(admission_key, count)
  if count > 0 then
    redis.call('HINCRBY', admission_key, 'moved', count)
  end
end

-- Called before users are added to the waiting set: a new epoch when it is
-- empty.
local function before_adding(admission_key, waiting_key, now)
  if redis.call('EXISTS', waiting_key) == 0 then
    redis.call('HSET', admission_key, 'epoch', int(now))
  end
end

-- Heartbeats. A waiting user's entry in the heartbeat ZSET is the time
-- (ms) by which their next poll is due: the time of the poll plus the
-- advice it was given (`pollAfterMs`). Cleanup removes users whose entry
-- is more than `timeout` in the past, the same rule as for the time of the
-- last poll (which is what an advice of 0 makes it), so instances that
-- write the time of the last poll and instances that write this can share
-- a queue, as during a rolling upgrade.
--
-- So a user who polls within each answer's advice is never removed, and
-- one who stops is removed once that advice and the timeout have passed.
-- Moving an entry in a sorted set of a million is the largest part of a
-- poll's cost, and a poll need not move it when the time still left until
-- the entry is a fair advice: from half the advice it would be given (and
-- at least `pmin`) to a quarter more (and at most `pmax`). The answer then
-- advises that time left, and the entry stays where it is. So an early
-- poll writes nothing, and the promise is the same either way: the answer's
-- advice ends at the entry.
--
-- A script reads and writes the entries of a whole batch in one call each
-- (ZMSCORE, then one ZADD of every entry that moves): a call from Lua costs
-- about as much as the sorted-set work it does, so a batch of 200 polls pays
-- for two calls, not 400.
--
-- heartbeats(key, now_ms, pmin, pmax) gives:
--   poll_after(wait_ms)  the advice: a quarter of the expected wait, from
--                        pmin to pmax (pmax when the wait is unknown, -1)
--   read(first, last)    reads the entries of ARGV[first..last] at once
--   keep(user, advice)   the advice to give a user who polls, writing the
--                        entry only if the time left to it is not a fair one
--   set(user, advice)    the entry of a new user, due after the advice
--   flush()              writes what keep and set decided: a script that
--                        calls either calls this before it returns
local function heartbeats(key, now_ms, pmin, pmax)
  local h, due, writes = {}, {}, {}
  function h.poll_after(wait_ms)
    if wait_ms < 0 then
      return pmax
    end
    return math.max(pmin, math.min(pmax, math.floor(wait_ms / 4)))
  end
  function h.read(first, last)
    local scores = redis.call('ZMSCORE', key, unpack(ARGV, first, last))
    for i = first, last do
      due[ARGV[i]] = tonumber(scores[i - first + 1]) or false
    end
  end
  function h.set(user, advice)
    due[user] = now_ms + advice
    writes[#writes + 1] = int(now_ms + advice)
    writes[#writes + 1] = user
  end
  function h.keep(user, advice)
    local entry = due[user]
    if entry == nil then
      entry = tonumber(redis.call('ZSCORE', key, user)) or false
    end
    local left = (entry or 0) - now_ms
    if left >= math.max(pmin, math.floor(advice / 2))
        and left <= math.min(pmax, advice + math.floor(advice / 4)) then
      return left
    end
    h.set(user, advice)
    return advice
  end
  function h.flush()
    for i = 1, #writes, 1000 do
      redis.call('ZADD', key, unpack(writes, i, math.min(i + 999, #writes)))
    end
    writes = {}
  end
  return h
end

-- The heartbeat settings of a script call: ARGV[first] timeout, then the
-- poll advice's bounds (ms). Nil when they do not make sense.
local function heartbeat_args(first)
  local timeout, pmin, pmax = tonumber(ARGV[first]), tonumber(ARGV[first + 1]),
    tonumber(ARGV[first + 2])
  if not timeout or timeout < 1 or not pmin or pmin < 1 or not pmax or pmax < pmin then
    return nil
  end
  return timeout, pmin, pmax
end

-- The users of a batch call: ARGV[first] to the end, at least one and at
-- most 500, each 1 to 128 bytes. Nil when any is not, so that a script can
-- refuse the whole call before its first write.
local function batch_users(first)
  local n = #ARGV - first + 1
  if n < 1 or n > 500 then
    return nil
  end
  for i = first, #ARGV do
    if #ARGV[i] == 0 or #ARGV[i] > 128 then
      return nil
    end
  end
  return n
end

-- Calls fn with the members of `list` at most 500 at a time: Lua's unpack
-- has a small stack limit, and batches may be up to 10000.
local function in_chunks(list, fn)
  for i = 1, #list, 500 do
    fn(unpack(list, i, math.min(i + 499, #list)))
  end
end

-- The operator's live settings and the event schedule of a queue, from its
-- control HASH (written by control.lua; absent fields keep the configured
-- values): paused, batch, interval, max_active (live admission overrides),
-- prequeue_from, open_at (ms), shuffle, placed (the pre-queue has been placed
-- in the waiting queue), floor (the lowest waiting score a registration after
-- the open may take: the placed pre-queue sits below it).
local function read_control(key)
  local c = redis.call('HMGET', key, 'paused', 'batch', 'interval', 'max_active',
    'prequeue_from', 'open_at', 'placed', 'floor')
  return {
    paused = c[1] == '1',
    batch = tonumber(c[2]),
    interval = tonumber(c[3]),
    max_active = tonumber(c[4]),
    prequeue_from = tonumber(c[5]),
    open_at = tonumber(c[6]),
    placed = c[7] == '1',
    floor = tonumber(c[8]),
  }
end

-- Where a queue's event stands at now_ms:
--   'open'       no event, or the event's pre-queue has been placed
--   'scheduled'  registration has not opened yet (before prequeue_from)
--   'prequeue'   registrations are pre-queued until open_at
--   'placing'    open_at has passed and the pre-queue is being placed
local function event_phase(c, now_ms)
  if not c.open_at or c.placed then
    return 'open'
  end
  if c.prequeue_from and now_ms < c.prequeue_from then
    return 'scheduled'
  end
  if now_ms < c.open_at then
    return 'prequeue'
  end
  return 'placing'
end

-- Offsets of a shuffled placement are 44-bit hashes: scores stay below 2^53
-- (base ~ 2^51 microseconds), and 1,000,000 users in 2^44 places share one
-- by chance about once in 35 opens (a tie is then ordered by userId, which
-- the recorded seed decides as well).
local SHUFFLE_SPAN = 17592186044416

-- Starts placing an event's pre-queue, once (whichever call comes first,
-- an admission or a registration after open_at): everyone already waiting
-- stays ahead; the pre-queue gets the scores from `base` up; everyone who
-- registers from now on gets a score at or above `floor`, behind it.
-- Returns base, floor.
local function start_placing(control_key, waiting_key, prequeue_key, now)
  local c = redis.call('HMGET', control_key, 'base', 'floor', 'shuffle')
  if c[1] then
    return tonumber(c[1]), tonumber(c[2])
  end
  local tail = redis.call('ZRANGE', waiting_key, -1, -1, 'WITHSCORES')
  local base = math.max(now, (tonumber(tail[2]) or 0) + 1)
  local count = redis.call('ZCARD', prequeue_key)
  local span = count
  if c[3] == '1' then
    span = SHUFFLE_SPAN
  end
  redis.call('HSET', control_key, 'base', int(base), 'floor', int(base + span),
    'opened_at', int(math.floor(now / 1000)), 'prequeued', count)
  return base, base + span
end
