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
  end
end

-- Heartbeats. A waiting user's entry in the heartbeat ZSET is the time
-- (ms) by which their next poll is due: the time of a poll plus the advice
-- it was given (`pollAfterMs`). Cleanup removes users whose entry is more
-- than `timeout` in the past, the same rule as for the time of the last
-- poll (which is what an advice of 0 makes it), so instances that write the
-- time of the last poll and instances that write this can share a queue,
-- as during a rolling upgrade.
--
-- So a poll promises that the user is not removed before its advice plus
-- `timeout` has passed. Moving an entry in a sorted set of a million was
-- the largest part of a poll's cost, so a poll rewrites the entry only when
-- it is too soon to keep that promise, or so late (after a longer advice,
-- as in a pause) that a user who stops polling would linger: later than
-- now + advice + slack + timeout / 2, the slack being half the timeout, or
-- three times the advice if that is longer. It then writes now + advice +
-- slack. As the wait shrinks a quarter as fast as time passes, a poll's
-- now + 4 x advice stays where the last write put it, and the extra half
-- timeout absorbs a rank that moved ahead of that, so most polls of a user
-- who follows the advice write nothing. A user who stops polling is
-- removed between advice + timeout and advice + slack + timeout / 2 +
-- timeout after their last poll. A registration or a placement writes
-- twice the advice plus half the timeout, so that the first poll, on time
-- or a little late, writes nothing: a user who never polls goes 2 x advice
-- + timeout / 2 + timeout after registering.
--
-- heartbeats(key, now_ms, timeout, pmin, pmax) gives:
--   poll_after(wait_ms)  the advice: a quarter of the expected wait, from
--                        pmin to pmax (pmax when the wait is unknown, -1)
--   keep(user, advice)   the promise, writing only if the entry is too soon
--                        or too late
--   set(user, advice)    the promise for a new user
local function heartbeats(key, now_ms, timeout, pmin, pmax)
  local half = math.floor(timeout / 2)
  local h = {}
  function h.poll_after(wait_ms)
    if wait_ms < 0 then
      return pmax
    end
    return math.max(pmin, math.min(pmax, math.floor(wait_ms / 4)))
  end
  function h.set(user, advice)
    redis.call('ZADD', key, int(now_ms + 2 * advice + half), user)
  end
  function h.keep(user, advice)
    local due = tonumber(redis.call('ZSCORE', key, user) or '0')
    local far = now_ms + advice + math.max(half, 3 * advice)
    if due < now_ms + advice or due > far + half then
      redis.call('ZADD', key, int(far), user)
    end
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
