-- rank: where each user of a batch stands; refreshes the heartbeat of each
-- waiting one. Concurrent polls of one queue on one instance share a call
-- (src/store/coalesce.rs); a lone poll is a batch of one.
--
-- KEYS[1] waiting ZSET, KEYS[2] heartbeat ZSET, KEYS[3] active ZSET,
-- KEYS[4] admission HASH (for the wait estimate and the rank counters),
-- KEYS[5] control HASH (live settings, event), KEYS[6] prequeue ZSET,
-- KEYS[7] due HASH, KEYS[8] dues ZSET (KEYS[2] and these: see `heartbeats`
-- in lib.lua), KEYS[9] numbering HASH, KEYS[10] marks STRING (a numbered
-- heartbeat's mark is written with it: see `marks` in lib.lua)
-- ARGV[1] admission interval (ms), ARGV[2] admission batch size (as
--         configured; the control hash may override both)
-- ARGV[3] heartbeat timeout (ms), ARGV[4], ARGV[5] the bounds of the poll
--         advice (ms): see `heartbeats` in lib.lua
-- ARGV[6], ARGV[7] the arrivals (waiting scores) from and before which the
--         instance derives ranks from its samples (src/store/ranks.rs);
--         0 0 when it derives none
-- ARGV[8] the places from the head whose ranks are always exact
--         (`exact-rank-window`)
-- ARGV[9] the departures (`removed`) the instance has read the log of since
--         its samples (see `departed` in lib.lua), and after a colon the
--         arrival it read for the last of them (if it read any): the log
--         after that is returned; -1 for none
-- ARGV[10..] userIds, 0 to 500 (none: the batch's numbers alone, for an
--         instance that reads and writes the heartbeats far back itself,
--         see `poll_many` in src/store/polls.rs)
--
-- Returns, for each user in order, four numbers:
--         1, rank, wait_ms, advice   waiting, with rank users ahead; wait_ms
--                                    is -1 while paused; poll again after
--                                    advice ms (the heartbeat promises that)
--         5, arrival, 0, advice      waiting far back, at this score: the
--                                    instance derives rank and wait
--         3, expiry, 0, 0            active until expiry (ms)
--         4, opens_in_ms, 0, advice  pre-queued: the queue opens in
--                                    opens_in_ms (0: opening now, the
--                                    pre-queue is being placed)
--         0, lost_at, 0, 0           not queued: nothing is written; lost_at
--                                    (ms) of the last loss of state while
--                                    its users may still be seated again,
--                                    Redis's time now while the state is
--                                    missing and not yet written back
--                                    (lua/reseat.lua: the instance asks only
--                                    for a credential older than it), else 0
--         6, 0, 0, 0                 the queue is closed (control.lua), for
--                                    anyone not active: nothing is written,
--                                    the place (if any) is kept as it is
-- and then twelve for the batch: the rank counters and the waiting set's
-- size (see `rank_counters` in lib.lua); the wait estimate's first_ms, rate
-- (users per window, in millionths; -1 while paused) and window (ms), from
-- which the instance estimates the wait of a rank it derives as this
-- script would; and Redis's time (ms), the arrival from which a poll is
-- decided far back (the later of ARGV[6] and the first place whose advice
-- is `pmax`), and 1 if polls far back are decided from the heartbeat alone
-- (the queue is open, the instance derives ranks, no earlier version's
-- heartbeats), else 0. Then, when ARGV[9] asked for them, the departures
-- logged since: the number of the entry before the first returned, 1 if
-- they follow on from what the instance read (else 0, see
-- `departures_since` in lib.lua), and the arrivals of up to 1000.
-- Codes: 0 not-queued, 1 waiting, 3 active, 4 prequeued, 5 far-back, 6 closed
--
-- A rank far back costs a ZRANK walk of the skiplist, a derived one only
-- the lookup of the heartbeat, which a poll makes anyway: the script
-- derives a user's rank only where the advice needs no rank, that is where
-- the expected wait is at least four times `pmax`, so the advice is `pmax`.
local interval, batch = tonumber(ARGV[1]), tonumber(ARGV[2])
local timeout, pmin, pmax = heartbeat_args(3)
local have, expect = string.match(ARGV[9] or '', '^(%-?%d+):?(%d*)$')
have = tonumber(have)
if #KEYS ~= 10 or not interval or interval < 1 or not batch or batch < 1 or not timeout
    or not tonumber(ARGV[6]) or not tonumber(ARGV[7]) or not tonumber(ARGV[8])
    or not have or (#ARGV > 9 and not batch_users(10)) then
  return redis.error_reply('ERR waitgate rank: bad arguments')
end
local now_ms = math.floor(now_us() / 1000)
local control = read_control(KEYS[5])
local phase = event_phase(control, now_ms)
interval = control.interval or interval
local estimate, first_ms, rate = wait_estimator(KEYS[4], now_ms, interval,
  control.batch or batch)
local beats = heartbeats(KEYS[2], KEYS[7], KEYS[8], KEYS[1], now_ms, pmin, pmax,
  {KEYS[9], KEYS[10]})
local values = {}
if #ARGV > 9 then
  values = redis.call('HMGET', KEYS[7], unpack(ARGV, 10, #ARGV))
end
if beats.legacy and #ARGV > 9 then
  beats.read(10, #ARGV, values)
end
if beats.legacy and phase == 'open' and #ARGV > 9 then
  -- Instances of an earlier version may be running: they change the
  -- waiting set without this HASH (a dropout leaves its heartbeat behind,
  -- a registration again a new arrival), so the set says who waits and
  -- since when.
  local scores = redis.call('ZMSCORE', KEYS[1], unpack(ARGV, 10, #ARGV))
  for i = 10, #ARGV do
    beats.arrive(ARGV[i], tonumber(scores[i - 9]))
  end
end

-- Where ranks are derived: from the instance's range, and no nearer than
-- the exact window or the first rank whose expected wait saturates the
-- advice. A user's arrival is read with their heartbeat (one lookup for
-- both); one whose heartbeat is past the timeout may have been removed by
-- an instance that does not keep this HASH, and gets the exact path.
local far_from, far_to = tonumber(ARGV[6]), tonumber(ARGV[7])
if phase == 'open' and far_to > far_from then
  local nearest = tonumber(ARGV[8])
  if not control.paused then
    local windows = math.ceil((4 * pmax - first_ms) / interval)
    nearest = math.max(nearest, math.ceil(windows * rate))
  end
  local at = redis.call('ZRANGE', KEYS[1], nearest, nearest, 'WITHSCORES')
  far_from = math.max(far_from, tonumber(at[2]) or far_to)
end
local function far_back(user)
  local arrival, due = beats.arrival(user), beats.due(user)
  return arrival and due and due >= now_ms - timeout and arrival >= far_from
    and arrival < far_to
end

local function rank_of(user)
  if control.closed then
    -- The closure holds the heartbeats (see `hold_heartbeats` in lib.lua):
    -- a poll writes none, and keeps the place as it is.
    local expiry = redis.call('ZSCORE', KEYS[3], user)
    if expiry and tonumber(expiry) > now_ms then
      return 3, tonumber(expiry), 0, 0
    end
    return 6, 0, 0, 0
  end
  if phase ~= 'open' then
    -- Before the open nobody has a place yet: no rank, no heartbeat.
    local opens_in = math.max(0, (control.open_at or now_ms) - now_ms)
    local advice = beats.poll_after(opens_in)
    local waiting = redis.call('ZSCORE', KEYS[1], user)
    if waiting then
      -- Waiting already (from before the event, or placed): polling keeps
      -- the place, as at any other time.
      advice = beats.keep(user, advice)
    end
    if waiting or redis.call('ZSCORE', KEYS[6], user) then
      return 4, opens_in, 0, advice
    end
  else
    if far_back(user) then
      return 5, beats.arrival(user), 0, beats.keep(user, pmax)
    end
    local rank = redis.call('ZRANK', KEYS[1], user)
    if rank then
      local wait = -1
      if not control.paused then
        wait = estimate(rank)
      end
      local advice = beats.keep(user, beats.poll_after(wait))
      return 1, rank, wait, advice
    end
  end
  local expiry = redis.call('ZSCORE', KEYS[3], user)
  if expiry and tonumber(expiry) > now_ms then
    return 3, tonumber(expiry), 0, 0
  end
  if not control.incarnation then
    -- The state is gone and no instance has noticed yet: any credential
    -- may name a place lost now (reseat.lua answers WAITGATE_LOST, and the
    -- instance writes back what it knows before it asks again).
    return 0, now_ms, 0, 0
  end
  if control.lost_at and now_ms <= control.reseat_until then
    return 0, control.lost_at, 0, 0
  end
  return 0, 0, 0, 0
end

local out = {}
local n = 0
-- Far back, where the advice is pmax whatever the rank: decided here from
-- the heartbeat alone. The heartbeat is kept when the time left is a fair
-- advice (see `keep` in lib.lua), else written as `<due>:<arrival>` with
-- the arrival's text as read.
local fast = phase == 'open' and far_to > far_from and not beats.legacy and not control.closed
local keep_low, keep_high = math.max(pmin, math.floor(pmax / 2)), math.min(pmax, pmax + math.floor(pmax / 4))
local oldest = now_ms - timeout
-- Every heartbeat this pass writes is due at the same time.
local far_at = now_ms + pmax
for i = 10, #ARGV do
  local user, value = ARGV[i], values[i - 9]
  local code, rank, wait, advice
  local colon = value and string.find(value, ':', 1, true)
  if fast and colon then
    -- (A user twice in one batch: the heartbeat this batch wrote.)
    local due = beats.due(user) or tonumber(string.sub(value, 1, colon - 1))
    local text = string.sub(value, colon + 1)
    -- (`<arrival>:<number>` for a numbered registration.)
    local second = string.find(text, ':', 1, true)
    local arrival = tonumber(second and string.sub(text, 1, second - 1) or text)
    if due and arrival and due >= oldest and arrival >= far_from and arrival < far_to then
      local left = due - now_ms
      if left >= keep_low and left <= keep_high then
        advice = left
      else
        beats.put(user, far_at, beats.at_text(far_at) .. text)
        advice = pmax
      end
      code, rank, wait = 5, arrival, 0
    end
  end
  if not code then
    if not beats.legacy and beats.due(user) == nil then
      beats.remember(user, value)
    end
    code, rank, wait, advice = rank_of(user)
  end
  out[n + 1], out[n + 2], out[n + 3], out[n + 4] = code, rank, wait, advice
  n = n + 4
end
beats.flush()
local rate_millionths = math.floor(rate * 1000000 + 0.5)
if control.paused or control.closed then
  rate_millionths = -1
end
local counters = rank_counters(KEYS[4], KEYS[1])
for _, n in ipairs(counters) do
  out[#out + 1] = n
end
out[#out + 1] = first_ms
out[#out + 1] = rate_millionths
out[#out + 1] = interval
out[#out + 1] = now_ms
out[#out + 1] = far_from
out[#out + 1] = fast and 1 or 0
if have >= 0 then
  local from, follows, arrivals = departures_since(KEYS[4], counters[3], have, 1000, expect)
  out[#out + 1] = from
  out[#out + 1] = follows
  for _, arrival in ipairs(arrivals) do
    out[#out + 1] = arrival
  end
end
return out
