-- lapse: the scan of the marks (see `marks` in lib.lua) takes out the
-- numbered users whose heartbeat stopped. The instance reads the marks in
-- plain GETRANGEs and names the numbers whose mark looked past the timeout
-- (src/store/marks.rs); this script checks each again with Redis's time and
-- the cutoff cleanup uses, and for each still past:
--   - finds the registration by its arrival (the arrivals STRING) and the
--     user waiting at that arrival, if any;
--   - if that user's heartbeat in the `due` HASH names this number and is
--     past the cutoff too, removes the user (as cleanup does);
--   - and clears the mark: of a user removed, admitted, gone with a state
--     Redis lost, or kept alive by the HASH's heartbeat (polls that did not
--     bring the number: cleanup's candidates look after those, and a poll
--     through rank.lua writes the mark again with the heartbeat).
--
-- KEYS[1] waiting ZSET, KEYS[2] prequeue ZSET, KEYS[3] admission HASH
-- (counts the removals: see `counted` in lib.lua), KEYS[4] due HASH,
-- KEYS[5] numbering HASH, KEYS[6] marks STRING, KEYS[7] arrivals STRING
-- ARGV[1] heartbeat timeout (ms), ARGV[2] outage grace (ms: see
-- `outage_cutoff` in lib.lua), ARGV[3..] numbers, 0 to 1000
--
-- Returns {removed, cleared, cutoff}: the users removed, the marks cleared
-- (theirs among them), and the cutoff (ms): a mark due before it is past
-- (the instance asks for it with no numbers, to pick the numbers to send).
local timeout, grace = tonumber(ARGV[1]), tonumber(ARGV[2])
if #KEYS ~= 7 or #ARGV < 2 or #ARGV > 1002 or not timeout or timeout < 1 or not grace
    or grace < 0 then
  return redis.error_reply('ERR waitgate lapse: bad arguments')
end
local numbers = {}
for i = 3, #ARGV do
  if not string.match(ARGV[i], '^%d+$') or #ARGV[i] > 16 then
    return redis.error_reply('ERR waitgate lapse: bad arguments')
  end
  numbers[#numbers + 1] = tonumber(ARGV[i])
end
local now_ms = math.floor(now_us() / 1000)
local cutoff = outage_cutoff(KEYS[3], now_ms, timeout, grace)
local base = numbers_base(KEYS[5])
if not base or #numbers == 0 then
  return {0, 0, cutoff}
end

-- The numbers whose mark is past the cutoff still.
local marks = read_marks(KEYS[5], KEYS[6], numbers)
local lapsed, get = {}, {}
for i, n in ipairs(numbers) do
  local due = marks[i] and mark_due(marks[i], now_ms)
  if due and due < cutoff then
    lapsed[#lapsed + 1] = n
    get[#get + 1], get[#get + 2], get[#get + 3] = 'GET', 'i64', '#' .. int(n - base)
  end
end
local arrivals = {}
for i = 1, #get, 300 do
  for _, a in ipairs(redis.call('BITFIELD_RO', KEYS[7], unpack(get, i, math.min(i + 299, #get)))) do
    arrivals[#arrivals + 1] = a
  end
end

local stale, writes, known = {}, {}, {}
for i, n in ipairs(lapsed) do
  local arrival = arrivals[i]
  local user = arrival and arrival > 0 and redis.call('ZRANGE', KEYS[1], arrival, arrival,
    'BYSCORE', 'LIMIT', 0, 1)[1]
  if user then
    local due, _, _, number = parse_heartbeat(redis.call('HGET', KEYS[4], user))
    if number == n and due < cutoff then
      stale[#stale + 1] = user
      known[user] = n
    end
  end
  writes[n] = 0
end
write_marks(KEYS[5], KEYS[6], writes)
local removed = 0
if #stale > 0 then
  in_chunks(stale, function(...) redis.call('HDEL', KEYS[4], ...) end)
  removed = remove_waiting(KEYS[1], KEYS[2], KEYS[3], stale, {KEYS[5], KEYS[6], KEYS[7]}, known)
end
return {removed, #lapsed, cutoff}
