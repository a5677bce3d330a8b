-- status: a queue's state as the admin API and the gauges report it, in
-- one read. Read-only: loaded with the `no-writes` flag. The event's phase
-- is decided here, by `event_phase` (lib.lua), the one place that rule
-- lives: waitgate reads it, never works it out again.
--
-- KEYS[1] control HASH, KEYS[2] waiting ZSET, KEYS[3] active ZSET,
-- KEYS[4] prequeue ZSET, KEYS[5] admission HASH
--
-- Returns {control (the HASH as field, value, ...: `paused`, and `closed`,
-- `closed_message` and `closed_at` while the queue is closed), waiting, active,
-- prequeued, rate (text, or nil), admitted in all (or nil), Redis time
-- (ms), {the last incident's kind, at (ms), length (ms)} (each nil when
-- none), phase}.
if #KEYS ~= 5 or #ARGV ~= 0 then
  return redis.error_reply('ERR waitgate status: bad arguments')
end
local now_ms = math.floor(now_us() / 1000)
local admission = redis.call('HMGET', KEYS[5], 'rate', 'total', 'incident', 'incident_at',
  'incident_ms')
return {
  redis.call('HGETALL', KEYS[1]),
  redis.call('ZCARD', KEYS[2]),
  redis.call('ZCARD', KEYS[3]),
  redis.call('ZCARD', KEYS[4]),
  -- (`false`: a nil would end the reply there.)
  admission[1] or false,
  admission[2] or false,
  now_ms,
  {admission[3] or false, admission[4] or false, admission[5] or false},
  event_phase(read_control(KEYS[1]), now_ms),
}
