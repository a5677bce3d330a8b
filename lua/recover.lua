-- recover: writes back what an instance knows of a queue whose state Redis
-- has lost (a restart without persistence, a failover to a replica that was
-- behind, a flush), or gives a queue seen for the first time its
-- incarnation (see `read_control` in lib.lua). Every instance remembers,
-- from its look each second (lua/watch.lua), the control HASH, the gate's
-- record and the active count, and keeps the revocations in force and the
-- places it saw spent; the first to find the state lost records the loss,
-- and every instance that knew more merges what it knew.
--
-- KEYS[1] control HASH, KEYS[2] admission HASH, KEYS[3] revoked ZSET,
-- KEYS[4] spent ZSET (userId -> the latest arrival that may not be seated
--         again: see lua/reseat.lua), KEYS[5] waiting ZSET, KEYS[6] active
--         ZSET, KEYS[7] credential HASH, KEYS[8] due HASH, KEYS[9] prequeue
--         ZSET
-- ARGV[1] the incarnation the instance knew ('' for none)
-- ARGV[2] a fresh incarnation (hex), taken if the state has none
-- ARGV[3] 'fresh': the instance knows nothing of the queue (its start);
--         'lost': it knew state that Redis no longer has
-- ARGV[4] max-active in effect when the instance last looked (0: no cap)
-- ARGV[5] active TTL (ms)
-- ARGV[6] active users then, ARGV[7] when (ms; 0: never looked), ARGV[8]
--         users admitted in all by then, ARGV[9] the batch size and
--         ARGV[10] the interval (ms) in effect
-- ARGV[11] how long after the loss nobody is admitted, while waiting users
--         come back to be seated again (the outage grace, ms), ARGV[12] how
--         long after it a registration it took may be seated again (ms)
-- ARGV[13] n, then n pairs: the control HASH as the instance last read it
-- then m and m pairs: the admission HASH's fields it read
-- then r and r pairs: revocations in force (userId, revoked at ms)
-- then s and s pairs: spent places (userId, arrival)
--
-- Returns {incarnation, recorded, held, held_until}: recorded is 1 when this
-- call recorded the loss (the instance logs it); held slots of max-active
-- are kept for tokens issued before the loss until held_until (ms).
local function whole(s)
  local n = tonumber(s)
  return n and n >= 0 and n == math.floor(n) and n
end
local known, fresh_id, why = ARGV[1], ARGV[2], ARGV[3]
local cap, ttl = whole(ARGV[4]), whole(ARGV[5])
local known_active, known_at, known_total = whole(ARGV[6]), whole(ARGV[7]), whole(ARGV[8])
local batch, interval = whole(ARGV[9]), whole(ARGV[10])
local rebuild_ms, reseat_ms = whole(ARGV[11]), whole(ARGV[12])
if #KEYS ~= 9 or #ARGV < 16 or not rebuild_ms or not reseat_ms or not string.match(fresh_id, '^%x+$') or #fresh_id > 64
    or (why ~= 'fresh' and why ~= 'lost') or not cap or not ttl or ttl < 1
    or not known_active or not known_at or not known_total or not batch or not interval
    or interval < 1 then
  return redis.error_reply('ERR waitgate recover: bad arguments')
end
-- The four lists of pairs, each checked before the first write.
local lists, at = {}, 13
for i = 1, 4 do
  local n = whole(ARGV[at])
  if not n or at + 2 * n > #ARGV then
    return redis.error_reply('ERR waitgate recover: bad arguments')
  end
  local pairs_ = {}
  for j = at + 1, at + 2 * n, 2 do
    pairs_[#pairs_ + 1] = {ARGV[j], ARGV[j + 1]}
  end
  lists[i] = pairs_
  at = at + 2 * n + 1
end
if at - 1 ~= #ARGV then
  return redis.error_reply('ERR waitgate recover: bad arguments')
end
local control_pairs, admission_pairs, revoked, spent = lists[1], lists[2], lists[3], lists[4]

local now_ms = math.floor(now_us() / 1000)
local current = redis.call('HGET', KEYS[1], 'incarnation')
if why == 'fresh' then
  if not current then
    current = fresh_id
    -- When it was made: an instance that knew an older state and finds
    -- this one knows it as a loss (an instance that knew nothing, a new
    -- one, may have been first to find the state gone).
    redis.call('HSET', KEYS[1], 'incarnation', current, 'born_at', int(now_ms))
    redis.call('HSETNX', KEYS[2], 'alive', int(now_ms))
  end
  return {current, 0, 0, 0}
end

-- Lost. The first call to find no incarnation, or this instance's own
-- incarnation with less in it than the instance saw, records the loss; so
-- does one that finds an incarnation made, after this instance last
-- looked, by an instance that knew nothing (no loss recorded since it was
-- made). One that finds another incarnation with the loss recorded only
-- merges.
local recorded = 0
if not current then
  current, recorded = fresh_id, 1
elseif current == known then
  recorded = 1
else
  local made = redis.call('HMGET', KEYS[1], 'born_at', 'lost_at')
  local born_at = tonumber(made[1]) or 0
  if born_at > known_at and (tonumber(made[2]) or 0) < born_at then
    recorded = 1
  end
end

-- The control HASH. The operator's settings (a closure and its message
-- among them) come from whichever side has seen more of the operator's
-- changes (`version`); the record of a placed pre-queue is kept where
-- Redis has one, else written back; a hold in force and the time of the
-- last loss take the later.
local snapshot = {}
for _, p in ipairs(control_pairs) do
  snapshot[p[1]] = p[2]
end
local control = {}
for _, field in ipairs({'version', 'held', 'held_until', 'lost_at', 'floor'}) do
  control[field] = tonumber(redis.call('HGET', KEYS[1], field))
end
local writes, deletes = {'incarnation', current}, {}
local function put(field, value)
  writes[#writes + 1] = field
  writes[#writes + 1] = value
end
if (tonumber(snapshot.version) or 0) > (control.version or 0) then
  for _, field in ipairs({'paused', 'closed', 'closed_message', 'closed_at', 'batch',
      'interval', 'max_active', 'prequeue_from', 'open_at', 'shuffle'}) do
    if snapshot[field] then
      put(field, snapshot[field])
    else
      deletes[#deletes + 1] = field
    end
  end
  put('version', snapshot.version)
end
-- Where a pre-queue is still there to place (a replica that was behind
-- in the middle of a placing), the placing goes on from where Redis is:
-- its progress is not written back, only what places users.
-- An event's record goes back only onto the same event (the open_at in
-- force after the merge above is the one the instance knew): a record of
-- another event would open it, or reveal its draw, at the wrong time. Its
-- draw (seed, commitment, committed_at) goes back whole or not at all.
local progress = {placed = true, placed_at = true, placed_count = true, cursor = true}
local placing = redis.call('EXISTS', KEYS[9]) == 1
local open_at_now = redis.call('HGET', KEYS[1], 'open_at')
if (tonumber(snapshot.version) or 0) > (control.version or 0) then
  open_at_now = snapshot.open_at
end
local same_event = snapshot.open_at ~= nil and snapshot.open_at == open_at_now
if same_event then
  for _, field in ipairs({'placed', 'placed_at', 'placed_count', 'cursor', 'base', 'opened_at',
      'prequeued', 'shuffle_bits'}) do
    if snapshot[field] and redis.call('HEXISTS', KEYS[1], field) == 0
        and not (placing and progress[field]) then
      put(field, snapshot[field])
    end
  end
  if snapshot.seed and redis.call('HEXISTS', KEYS[1], 'seed') == 0
      and redis.call('HEXISTS', KEYS[1], 'commitment') == 0 then
    for _, field in ipairs({'seed', 'commitment', 'committed_at'}) do
      if snapshot[field] then
        put(field, snapshot[field])
      end
    end
  end
end
-- The last draw that opened stays public.
if snapshot.previous_seed and redis.call('HEXISTS', KEYS[1], 'previous_seed') == 0 then
  for _, field in ipairs({'previous_seed', 'previous_commitment', 'previous_open_at'}) do
    if snapshot[field] then
      put(field, snapshot[field])
    end
  end
end
local floor = math.max(tonumber(snapshot.floor) or 0, control.floor or 0)
if floor > 0 then
  put('floor', int(floor))
end

-- The hold: tokens issued before the loss still count against max-active
-- until they expire, at most a TTL from now. Those Redis lost are at most
-- the active users the instance saw, plus a batch for each window since
-- (and one for the window it looked in), and at most the admissions Redis
-- no longer counts; with no look to go by, the whole cap.
local held, until_ms = 0, 0
if cap > 0 then
  held = cap
  if known_at > 0 then
    local since = math.floor(math.max(0, now_ms - known_at) / interval) + 2
    local total = tonumber(redis.call('HGET', KEYS[2], 'total')) or 0
    held = math.min(cap, known_active + batch * since,
      math.max(0, known_total + batch * since - total))
  end
  until_ms = now_ms + ttl
end
local before_until = math.max(control.held_until or 0, tonumber(snapshot.held_until) or 0)
if before_until > now_ms then
  held = math.max(held, control.held or 0, tonumber(snapshot.held) or 0)
  until_ms = math.max(until_ms, before_until)
end
if held > 0 then
  put('held', held)
  put('held_until', int(until_ms))
else
  until_ms = 0
end
-- The time of the loss: registrations older than it may be seated again
-- (on this server's clock, which may lag the old one's: at least a second
-- after this instance's last look), until reseat_until; nobody is
-- admitted before rebuild_until, while waiting users come back.
local lost_at = math.max(control.lost_at or 0, tonumber(snapshot.lost_at) or 0)
if recorded == 1 then
  lost_at = math.max(now_ms, known_at + 1000)
  put('reseat_until', int(now_ms + rebuild_ms + reseat_ms))
  put('rebuild_until', int(now_ms + rebuild_ms))
else
  for _, field in ipairs({'reseat_until', 'rebuild_until', 'lost_frontier',
      'lost_frontier_prequeue'}) do
    if snapshot[field] and redis.call('HEXISTS', KEYS[1], field) == 0 then
      put(field, snapshot[field])
    end
  end
end
put('lost_at', int(lost_at))
if #deletes > 0 then
  redis.call('HDEL', KEYS[1], unpack(deletes))
end
redis.call('HSET', KEYS[1], unpack(writes))
-- A closed queue holds its waiting users' heartbeats (`hold_heartbeats` in
-- lib.lua), whichever side said it is closed; one written back as open
-- lets them go, after the grace that follows a loss.
if redis.call('HGET', KEYS[1], 'closed') == '1' then
  hold_heartbeats(KEYS[2], now_ms)
else
  release_heartbeats(KEYS[2], now_ms, rebuild_ms)
end

-- The gate's record: counts and frontiers only grow; the last decided
-- window is the later one, so that no window is decided twice.
local gate = redis.call('HMGET', KEYS[2], 'total', 'frontier', 'frontier_prequeue', 'next',
  'rate', 'out_of_order', 'last_arrival')
local read = {}
for _, p in ipairs(admission_pairs) do
  read[p[1]] = p[2]
end
local record = {'alive', int(now_ms)}
local function grow(field, have)
  local mine = tonumber(read[field])
  if mine and mine > (tonumber(have) or -1) then
    record[#record + 1] = field
    record[#record + 1] = read[field]
  end
end
grow('total', gate[1])
grow('frontier', gate[2])
grow('frontier_prequeue', gate[3])
grow('out_of_order', gate[6])
if read.last_arrival and not gate[7] then
  record[#record + 1] = 'last_arrival'
  record[#record + 1] = read.last_arrival
end
if tonumber(read.next) and tonumber(read.next) > (tonumber(gate[4]) or 0) then
  for _, field in ipairs({'window', 'next', 'window_ms'}) do
    if read[field] then
      record[#record + 1] = field
      record[#record + 1] = read[field]
    end
  end
end
if read.rate and not gate[5] then
  record[#record + 1] = 'rate'
  record[#record + 1] = read.rate
end
if recorded == 1 then
  for _, v in ipairs({'incident', 'data_loss', 'incident_at', int(now_ms), 'incident_ms', 0}) do
    record[#record + 1] = v
  end
end
redis.call('HSET', KEYS[2], unpack(record))
if recorded == 1 then
  -- The frontier as the loss left it, which seating again compares with.
  local frontier = redis.call('HMGET', KEYS[2], 'frontier', 'frontier_prequeue')
  redis.call('HSET', KEYS[1], 'lost_frontier', frontier[1] or '0',
    'lost_frontier_prequeue', frontier[2] or '0')
end

-- A Redis that was behind may still have waiting users the gate had
-- admitted (at or before the frontier written back): they are active
-- again, with their admitted registration's arrival, so that their token
-- exchange works, and are not admitted twice. The slots held for what was
-- lost then hold fewer.
-- (A pre-queue user seated again in arrival order sits at the pre-queue
-- arrival, below the placed ones: admitted only if that arrival is at or
-- before the pre-queue's frontier.)
-- The frontier is what this instance knew (Redis's own, once admission
-- goes on after the loss, passes users seated again who came back late).
if recorded == 1 or current ~= known then
  local by_arrival = redis.call('HGET', KEYS[1], 'shuffle') ~= '1'
  local frontier_prequeue = tonumber(read.frontier_prequeue) or 0
  if tonumber(read.frontier) then
    local admitted = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', read.frontier, 'WITHSCORES')
    local expiry = int(now_ms + ttl)
    local made_active = 0
    for i = 1, #admitted, 2 do
      local user = admitted[i]
      local prequeued = tonumber(redis.call('ZSCORE', KEYS[9], user))
      if not (prequeued and by_arrival and prequeued > frontier_prequeue) then
        redis.call('ZREM', KEYS[5], user)
        redis.call('ZREM', KEYS[9], user)
        redis.call('HDEL', KEYS[8], user)
        redis.call('ZADD', KEYS[6], expiry, user)
        redis.call('HSET', KEYS[7], user, int(prequeued or tonumber(admitted[i + 1])))
        made_active = made_active + 1
      end
    end
    if made_active > 0 and held > 0 then
      held = math.max(0, held - made_active)
      redis.call('HSET', KEYS[1], 'held', held)
    end
  end
end

-- Revocations in force and spent places: the later of each.
for _, p in ipairs(revoked) do
  if whole(p[2]) then
    redis.call('ZADD', KEYS[3], 'GT', p[2], p[1])
  end
end
for _, p in ipairs(spent) do
  if whole(p[2]) then
    redis.call('ZADD', KEYS[4], 'GT', p[2], p[1])
  end
end
return {current, recorded, held, until_ms}
