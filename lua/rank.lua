-- rank: where each user of a batch stands; refreshes the heartbeat of each
-- waiting one. Concurrent polls of one queue on one instance share a call
-- (src/store/coalesce.rs); a lone poll is a batch of one.
--
-- KEYS[1] waiting ZSET, KEYS[2] heartbeat ZSET, KEYS[3] active ZSET,
-- KEYS[4] admission HASH (for the wait estimate),
-- KEYS[5] control HASH (live settings, event), KEYS[6] prequeue ZSET
-- ARGV[1] admission interval (ms), ARGV[2] admission batch size (as
--         configured; the control hash may override both)
-- ARGV[3] heartbeat timeout (ms), ARGV[4], ARGV[5] the bounds of the poll
--         advice (ms): see `heartbeats` in lib.lua
-- ARGV[6..] userIds, 1 to 500
--
-- Returns, for each user in order, four numbers:
--         1, rank, wait_ms, advice   waiting, with rank users ahead; wait_ms
--                                    is -1 while paused; poll again after
--                                    advice ms (the heartbeat promises that)
--         3, expiry, 0, 0            active until expiry (ms)
--         4, opens_in_ms, 0, advice  pre-queued: the queue opens in
--                                    opens_in_ms (0: opening now, the
--                                    pre-queue is being placed)
--         0, 0, 0, 0                 not queued: nothing is written
local interval, batch = tonumber(ARGV[1]), tonumber(ARGV[2])
local timeout, pmin, pmax = heartbeat_args(3)
if #KEYS ~= 6 or not interval or interval < 1 or not batch or batch < 1 or not timeout
    or not batch_users(6) then
  return redis.error_reply('ERR waitgate rank: bad arguments')
end
local now_ms = math.floor(now_us() / 1000)
local control = read_control(KEYS[5])
local phase = event_phase(control, now_ms)
local estimate = wait_estimator(KEYS[4], now_ms, control.interval or interval,
  control.batch or batch)
local beats = heartbeats(KEYS[2], now_ms, pmin, pmax)

local function rank_of(user)
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
  return 0, 0, 0, 0
end

local out = {}
for i = 6, #ARGV do
  local code, value, wait, advice = rank_of(ARGV[i])
  out[#out + 1] = code
  out[#out + 1] = value
  out[#out + 1] = wait
  out[#out + 1] = advice
end
return out
