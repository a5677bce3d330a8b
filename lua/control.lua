-- control: an operator's change to a queue, from the admin API. Every
-- instance reads the control hash on each admission, register and rank
-- call, so a change holds everywhere from its next call on.
--
-- KEYS[1] control HASH (see lib.lua), KEYS[2] admission HASH,
-- KEYS[3] prequeue ZSET
-- ARGV[1] the change:
--   'pause' | 'resume'
--   'close'     ARGV[2] the operator's message (1 to 500 bytes): nobody joins
--               or is admitted until a reopen; the waiting keep their places
--               (a closure holds their heartbeats: see `hold_heartbeats` in
--               lib.lua). Closing a closed queue changes its message only.
--   'reopen'    ARGV[2] the grace (ms) after it before silence counts
--               against a heartbeat again
--   'admission' ARGV[2] batch, ARGV[3] interval (ms), ARGV[4] max active:
--               each a number, '' to leave it, or '-' for the configured value
--   'admission' takes ARGV[5] too: the configured interval (ms), for '-'
--   'event'     ARGV[2] prequeue_from (ms, '' = now), ARGV[3] open_at (ms),
--               ARGV[4] shuffle ('1' or '0'), and for a shuffle ARGV[5] the
--               draw's seed (64 hex digits) and ARGV[6] its commitment (the
--               hex SHA-256 of its 32 bytes: waitgate computes it, as
--               scripts have no SHA-256), else '' and ''. Each schedule draws
--               a new seed; the one of an event that opened is kept as
--               `previous_*` (src/fairness/).
--   'end-event' a pending event opens now; a past one is forgotten
--
-- Returns {code, now_ms}: code 1 done, -1 refused: a pre-queue is being
-- placed right now, -2 refused: open_at is not in the future (Redis clock),
-- -3 refused: prequeue_from is after open_at.
-- Codes: 1 done, -1 placing, -2 open-at-past, -3 prequeue-after-open
local action = ARGV[1]
if #KEYS ~= 3 or not action then
  return redis.error_reply('ERR waitgate control: bad arguments')
end
local now_ms = math.floor(now_us() / 1000)
local control = read_control(KEYS[1])
if not control.incarnation then
  -- A change made over a lost state would be taken for the operator's
  -- latest and outvote what the instances write back: they write back
  -- first, then the change is made.
  return lost_reply()
end
local phase = event_phase(control, now_ms)

-- What an event records as it is scheduled and placed (see lib.lua).
local EVENT_RECORD = {'placed', 'placed_at', 'placed_count', 'cursor', 'seed',
  'commitment', 'committed_at', 'base', 'opened_at', 'prequeued', 'shuffle_bits'}

-- The draw of an event that has opened stays public after a new event is
-- scheduled or the old one is forgotten: its seed, commitment and open.
local function keep_opened_draw(key)
  local c = redis.call('HMGET', key, 'seed', 'commitment', 'open_at', 'placed', 'shuffle')
  if c[1] and c[2] and c[3] and c[4] == '1' and c[5] == '1' then
    redis.call('HSET', key, 'previous_seed', c[1], 'previous_commitment', c[2],
      'previous_open_at', c[3])
  end
end

local function number_or_mark(s, min)
  if s == '' or s == '-' then
    return true
  end
  local n = tonumber(s)
  return n and n >= min and n == math.floor(n)
end

if action == 'pause' and #ARGV == 1 then
  redis.call('HSET', KEYS[1], 'paused', '1')
elseif action == 'resume' and #ARGV == 1 then
  -- A resume also ends the holds kept after a loss of state
  -- (lua/recover.lua): the slots held, and the wait for the waiting users
  -- to come back.
  redis.call('HDEL', KEYS[1], 'paused', 'held', 'held_until', 'rebuild_until')
elseif action == 'close' and #ARGV == 2 and #ARGV[2] >= 1 and #ARGV[2] <= 500 then
  if not control.closed then
    redis.call('HSET', KEYS[1], 'closed', '1', 'closed_at', int(now_ms))
  end
  redis.call('HSET', KEYS[1], 'closed_message', ARGV[2])
  hold_heartbeats(KEYS[2], now_ms)
elseif action == 'reopen' and #ARGV == 2 and tonumber(ARGV[2]) and tonumber(ARGV[2]) >= 0 then
  redis.call('HDEL', KEYS[1], 'closed', 'closed_at', 'closed_message')
  release_heartbeats(KEYS[2], now_ms, tonumber(ARGV[2]))
elseif action == 'admission' and #ARGV == 5 and tonumber(ARGV[5]) and number_or_mark(ARGV[2], 1)
    and number_or_mark(ARGV[3], 1) and number_or_mark(ARGV[4], 0) then
  for i, field in ipairs({'batch', 'interval', 'max_active'}) do
    local value = ARGV[i + 1]
    if value == '-' then
      redis.call('HDEL', KEYS[1], field)
    elseif value ~= '' then
      redis.call('HSET', KEYS[1], field, value)
    end
  end
  if ARGV[2] ~= '' or ARGV[3] ~= '' then
    -- The observed rate was of the old setting: estimates start again from
    -- the new batch size.
    redis.call('HDEL', KEYS[2], 'rate')
  end
  local interval = tonumber(ARGV[3])
  if ARGV[3] == '-' then
    interval = tonumber(ARGV[5])
  end
  if ARGV[3] ~= '' then
    -- Window numbers of the old length mean nothing in the new one.
    redis.call('HDEL', KEYS[2], 'window', 'window_ms')
  end
  if interval then
    -- The next decision comes no later than the new window's end.
    local decided_until = tonumber(redis.call('HGET', KEYS[2], 'next'))
    local window_end = (math.floor(now_ms / interval) + 1) * interval
    if decided_until and decided_until > window_end then
      redis.call('HSET', KEYS[2], 'next', int(window_end))
    end
  end
elseif action == 'event' and #ARGV == 6 and (ARGV[4] == '1' or ARGV[4] == '0')
    and ((ARGV[4] == '1' and string.match(ARGV[5], '^%x+$') and #ARGV[5] == 64
        and string.match(ARGV[6], '^%x+$') and #ARGV[6] == 64)
      or (ARGV[4] == '0' and ARGV[5] == '' and ARGV[6] == '')) then
  if phase == 'placing' then
    return {-1, now_ms}
  end
  local open_at = tonumber(ARGV[3])
  local prequeue_from = tonumber(ARGV[2]) or now_ms
  if not open_at or open_at <= now_ms then
    return {-2, now_ms}
  end
  if prequeue_from > open_at then
    return {-3, now_ms}
  end
  -- A new event starts a new record; the floor stays, so that users a past
  -- event placed keep their places ahead of later arrivals.
  keep_opened_draw(KEYS[1])
  redis.call('HDEL', KEYS[1], unpack(EVENT_RECORD))
  -- (The pre-queue may still hold users a past event placed who wait yet:
  -- the next placing skips them, so they keep their places.)
  redis.call('HSET', KEYS[1], 'prequeue_from', int(prequeue_from), 'open_at', int(open_at),
    'shuffle', ARGV[4])
  if ARGV[4] == '1' then
    redis.call('HSET', KEYS[1], 'seed', ARGV[5], 'commitment', ARGV[6], 'committed_at',
      int(now_ms))
  end
elseif action == 'end-event' and #ARGV == 1 then
  if phase == 'placing' then
    return {-1, now_ms}
  end
  if phase == 'open' then
    keep_opened_draw(KEYS[1])
    redis.call('HDEL', KEYS[1], 'prequeue_from', 'open_at', 'shuffle', unpack(EVENT_RECORD))
  else
    -- Whoever pre-queued is placed at once, as at the open.
    redis.call('HSET', KEYS[1], 'prequeue_from', int(now_ms), 'open_at', int(now_ms))
  end
else
  return redis.error_reply('ERR waitgate control: bad arguments')
end
redis.call('HINCRBY', KEYS[1], 'version', 1)
return {1, now_ms}
