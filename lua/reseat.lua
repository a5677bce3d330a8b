-- reseat: seats again a waiting user whose place Redis lost (see
-- lua/recover.lua), at the arrival their queueCredential records, ahead of
-- everyone who arrived later. waitgate has checked the credential's MAC
-- (src/queue_api/credential.rs) and found the user not queued.
--
-- Refused (nothing is written) unless all of these hold:
-- - the credential's registration is older than the last loss of state
--   (`lost_at`), and the loss recent (`reseat_until`: the time its users
--   need to come back): without a loss, a user not queued has left;
-- - the user is not waiting, pre-queued or active now;
-- - the place is after the admission frontier at the loss
--   (`lost_frontier`; admission is first come, first served: every place
--   at or before it was admitted or left; one admitted since is marked
--   spent by admit.lua);
-- - the registration is not spent: the user did not leave it (a dropout
--   marks it) and was not admitted from a later one. Seated again, the
--   user waits, so the credential seats nobody else while they do, and
--   whatever ends the wait marks it spent or is another loss.
--
-- Where the registration stood: a user who registered in a scheduled
-- open's pre-queue is placed where the open placed them (shuffled: from the
-- recorded seed, as admit.lua placed them; in arrival order: at the
-- arrival itself, which is ahead of the whole placed pre-queue and behind
-- everyone who waited before it); before the open, they go back into the
-- pre-queue. Anyone else sits at the arrival.
--
-- KEYS[1] waiting ZSET, KEYS[2] heartbeat ZSET (of earlier versions),
-- KEYS[3] active ZSET, KEYS[4] admission HASH, KEYS[5] control HASH,
-- KEYS[6] prequeue ZSET, KEYS[7] due HASH, KEYS[8] dues ZSET,
-- KEYS[9] spent ZSET
-- ARGV[1] userId, ARGV[2] the arrival the credential names (microseconds)
-- ARGV[3] admission interval (ms), ARGV[4] batch size (as configured)
-- ARGV[5] heartbeat timeout (ms), ARGV[6], ARGV[7] the poll advice's bounds
--
-- Returns {code, rank, wait_ms, advice} as rank.lua does for one user:
-- 1 seated (rank users ahead; wait_ms -1 while paused), 4 back in the
-- pre-queue, or seated before a scheduled open (rank: opens in ms),
-- 0 refused; or WAITGATE_LOST while the
-- queue has no state (the instance writes back what it knows first).
-- Codes: 0 refused, 1 seated, 4 prequeued
local user, arrival = ARGV[1], tonumber(ARGV[2])
local interval, batch = tonumber(ARGV[3]), tonumber(ARGV[4])
local timeout, pmin, pmax = heartbeat_args(5)
if #KEYS ~= 9 or #ARGV ~= 7 or #user == 0 or #user > 128
    or not string.match(ARGV[2], '^%d+$') or #ARGV[2] > 16 or not interval or interval < 1
    or not batch or batch < 1 or not timeout then
  return redis.error_reply('ERR waitgate reseat: bad arguments')
end
local now = now_us()
local now_ms = math.floor(now / 1000)
local control = read_control(KEYS[5])
if not control.incarnation then
  return lost_reply()
end
local refused = {0, 0, 0, 0}
if not control.lost_at or arrival >= control.lost_at * 1000 or now_ms > control.reseat_until then
  return refused
end
if redis.call('ZSCORE', KEYS[1], user) or redis.call('ZSCORE', KEYS[6], user) then
  return refused
end
local expiry = tonumber(redis.call('ZSCORE', KEYS[3], user))
if expiry and expiry > now_ms then
  return refused
end
local spent = tonumber(redis.call('ZSCORE', KEYS[9], user))
if spent and spent >= arrival then
  return refused
end

local phase = event_phase(control, now_ms)
local prequeued = control.prequeue_from and control.open_at
  and arrival >= control.prequeue_from * 1000 and arrival < control.open_at * 1000
local beats = heartbeats(KEYS[2], KEYS[7], KEYS[8], KEYS[1], now_ms, pmin, pmax)
if prequeued and phase == 'prequeue' then
  redis.call('ZADD', KEYS[6], ARGV[2], user)
  local opens_in = math.max(0, control.open_at - now_ms)
  return {4, opens_in, 0, beats.poll_after(opens_in)}
end
if phase == 'placing' or (prequeued and phase ~= 'open') then
  -- The pre-queue being placed, or a pre-queue registration while another
  -- event is scheduled: later, or never.
  return refused
end

local gate = redis.call('HMGET', KEYS[4], 'frontier', 'frontier_prequeue')
local lost = redis.call('HMGET', KEYS[5], 'lost_frontier', 'lost_frontier_prequeue')
-- The frontier as the loss found it: one that moved since passed users who
-- had not come back yet.
local place = arrival
local frontier = tonumber(lost[1]) or tonumber(gate[1]) or 0
if prequeued then
  local c = redis.call('HMGET', KEYS[5], 'seed', 'base', 'shuffle', 'shuffle_bits', 'commitment')
  local base, bits = tonumber(c[2]), tonumber(c[4]) or 44
  if c[1] and base and c[3] == '1' and bits > 0 then
    -- As admit.lua placed them.
    place = base + draw_offset(c[1], bits, c[5] ~= false, queue_of(KEYS[5]), user)
  else
    -- In arrival order: admitted placed users are a prefix by arrival.
    frontier = tonumber(lost[2]) or tonumber(gate[2]) or 0
  end
end
if place <= frontier then
  return refused
end

if redis.call('EXISTS', KEYS[1]) == 0 then
  before_adding(KEYS[4], KEYS[1], now)
end
redis.call('ZADD', KEYS[1], int(place), user)
if prequeued then
  redis.call('ZADD', KEYS[6], ARGV[2], user)
end
-- Seated anywhere but at the tail: a derived rank may be off by one more.
counted(KEYS[4], 'added', 1)
interval = control.interval or interval
local estimate = wait_estimator(KEYS[4], now_ms, interval, control.batch or batch)
local rank = redis.call('ZRANK', KEYS[1], user)
local wait = -1
if not control.paused then
  wait = estimate(rank)
end
if phase ~= 'open' then
  -- Waiting from before a scheduled open: polls are told when it opens,
  -- as rank.lua tells them.
  local opens_in = math.max(0, (control.open_at or now_ms) - now_ms)
  local advice = beats.poll_after(opens_in)
  beats.set(user, advice, place)
  beats.flush()
  return {4, opens_in, 0, advice}
end
local advice = beats.poll_after(wait)
beats.set(user, advice, place)
beats.flush()
return {1, rank, wait, advice}
