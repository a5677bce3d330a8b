-- Shared helpers: waitgate prepends this file to every script in lua/ when it
-- loads them (see src/store/scripts.rs), so each script reads as if these were
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
  local gate = redis.call('HMGET', admission_key, 'window', 'rate', 'window_ms')
  local last_window = tonumber(gate[1]) or -1
  -- The last admission's window as a time (its length may have changed).
  local last_start = last_window * (tonumber(gate[3]) or interval_ms)
  local rate = tonumber(gate[2]) or batch
  if rate < 0.01 then
    rate = 0.01
  end
  local window = math.floor(now_ms / interval_ms)
  local first_ms = 0
  if last_start >= window * interval_ms then
    first_ms = (window + 1) * interval_ms - now_ms
  end
  return function(rank)
    return first_ms + math.floor(rank / rate) * interval_ms
  end, first_ms, rate
end

-- Calls fn with the members of `list` at most 500 at a time: Lua's unpack
-- has a small stack limit, and batches may be up to 10000.
local function in_chunks(list, fn)
  for i = 1, #list, 500 do
    fn(unpack(list, i, math.min(i + 499, #list)))
  end
end

-- Ranks far back are derived by the instances from samples of the waiting
-- set (src/store/ranks.rs), corrected by counters in the admission HASH of
-- every change to the set: `total`, the users admitted (always from the
-- head, so ahead of everyone still waiting); `removed`, the other users
-- who left (dropouts, cleanup), and `added`, users placed anywhere but at
-- the tail (a scheduled open's pre-queue), which bound how far a derived
-- rank can be off; and `joined`, the registrations at the tail, which move
-- nobody's rank but let an instance check that every change was counted
-- (the size of the set must agree). `epoch` changes when the waiting set
-- starts anew (empty, then a first user), so that samples of an earlier
-- set are never used for a new one.
local function counted(admission_key, counter, count)
  if count > 0 then
    redis.call('HINCRBY', admission_key, counter, count)
  end
end

-- The departures `removed` counts, each logged in `<admission>:departed`, a
-- LIST of `<number>:<arrival>` (the departure's number, as `removed` counts
-- it, and the user's score in the waiting set), whose last entry is always
-- number `removed`. An instance that has read the log since its samples were
-- taken knows how many of those who left were ahead of a user, and derives
-- the user's rank as exactly as the samples allow, however many left
-- (src/store/ranks.rs); one that has not read it, or finds it cut short,
-- bounds the rank by every departure as before. The newest DEPARTURES_KEPT
-- are kept (about 25 bytes each): samples older than 30 s are not used, and
-- a crowd leaving faster than that only turns the instances back to the
-- bound.
local DEPARTURES_KEPT = 50000
local function departed_log(admission_key)
  return admission_key .. ':departed'
end
local function departed(admission_key, arrivals)
  if #arrivals == 0 then
    return
  end
  local number = redis.call('HINCRBY', admission_key, 'removed', #arrivals) - #arrivals
  local entries = {}
  for i, arrival in ipairs(arrivals) do
    entries[i] = int(number + i) .. ':' .. arrival
  end
  local log, length = departed_log(admission_key), 0
  in_chunks(entries, function(...)
    length = redis.call('RPUSH', log, ...)
  end)
  if length > DEPARTURES_KEPT + DEPARTURES_KEPT / 4 then
    redis.call('LTRIM', log, -DEPARTURES_KEPT, -1)
  end
end

-- The arrivals of departures logged after number `have`, at most `most`,
-- the earliest first, as of `removed`; the number of the entry before the
-- first returned; and 1 if they follow on from what the instance read, else
-- 0. They do not when the log no longer holds the entries after `have` (cut
-- short), or when entry `have` is not the arrival `expect` the instance
-- read for it (''): a Redis that went back in time (a failover to a replica
-- that was behind) numbers departures again, and the instance must not go
-- on adding to what it read before. The entries read are checked against
-- their numbers: what does not follow on (a log that outlived its counter)
-- is left out.
local function departures_since(admission_key, removed, have, most, expect)
  local log = departed_log(admission_key)
  local oldest = removed - redis.call('LLEN', log)
  local arrivals = {}
  -- An entry's number and arrival, or nil.
  local function read(entry)
    local colon = entry and string.find(entry, ':', 1, true)
    if colon then
      return tonumber(string.sub(entry, 1, colon - 1)), tonumber(string.sub(entry, colon + 1))
    end
  end
  if have < oldest then
    return oldest, 0, arrivals
  end
  if expect ~= '' and have > oldest then
    local number, arrival = read(redis.call('LINDEX', log, have - oldest - 1))
    if number ~= have or arrival ~= tonumber(expect) then
      return have, 0, arrivals
    end
  end
  local upto = math.min(removed, have + most)
  if upto <= have then
    return math.min(have, removed), 1, arrivals
  end
  for i, entry in ipairs(redis.call('LRANGE', log, have - oldest, upto - oldest - 1)) do
    local number, arrival = read(entry)
    if not arrival or number ~= have + i then
      break
    end
    arrivals[i] = arrival
  end
  return have, 1, arrivals
end

-- The counters and size of the waiting set, as the instances read them with
-- each sample and each rank call.
local function rank_counters(admission_key, waiting_key)
  local c = redis.call('HMGET', admission_key, 'epoch', 'total', 'removed', 'added', 'joined')
  return {tonumber(c[1]) or 0, tonumber(c[2]) or 0, tonumber(c[3]) or 0, tonumber(c[4]) or 0,
    tonumber(c[5]) or 0, redis.call('ZCARD', waiting_key)}
end

-- Called before users are added to the waiting set: a new epoch when it is
-- empty.
local function before_adding(admission_key, waiting_key, now)
  if redis.call('EXISTS', waiting_key) == 0 then
    redis.call('HSET', admission_key, 'epoch', int(now))
  end
end

-- Heartbeats. A waiting user's heartbeat is the time (ms) by which their
-- next poll is due: the time of the poll plus the advice it was given
-- (`pollAfterMs`). Cleanup removes users whose heartbeat is more than
-- `timeout` in the past, the same rule as for the time of the last poll
-- (which is what an advice of 0 makes it).
--
-- So a user who polls within each answer's advice is never removed, and
-- one who stops is removed once that advice and the timeout have passed.
-- A poll need not write when the time still left is a fair advice: from
-- half the advice it would be given (and at least `pmin`) to a quarter more
-- (and at most `pmax`). The answer then advises that time left. So an early
-- poll writes nothing, and the promise is the same either way: the answer's
-- advice ends at the heartbeat.
--
-- Where they are kept. Moving an entry in a sorted set of a million cost
-- more than all the rest of a poll, so heartbeats are a HASH (due_key:
-- userId -> `<due>:<arrival>`), which a poll overwrites in place, and
-- cleanup finds the silent among candidates: each write also appends the
-- user to the list of its due time's bucket (`<dues_key>:<end>`, the
-- bucket's end in ms, `span` wide), and the ZSET dues_key indexes the
-- buckets by their end. Once a bucket's end is `timeout` past, cleanup
-- takes its users and removes those whose heartbeat is still as old; those
-- who polled since have a later one, and a later candidate. So a silent
-- user goes within the advice, the timeout, one bucket and one cleanup
-- interval; the bucket is `pmin` wide, at most a second. A user has a
-- candidate for each heartbeat written in the last advice and timeout:
-- about two far back with the defaults.
--
-- Instances of the version before this one keep heartbeats in the sorted
-- set legacy_key (userId -> due). While it exists, a poll reads both and
-- takes the later, a write moves the user out of it into the HASH, and
-- cleanup removes a user only when both say so; once every instance runs
-- this version it empties and costs one EXISTS per call.
--
-- A script reads and writes the heartbeats of a whole batch in one call
-- each: a call from Lua costs about as much as the work it does.
--
-- A heartbeat is written as `<due>:<arrival>`, the user's score in the
-- waiting set with it, so that a poll far back finds both in one lookup
-- (see rank.lua), or `<due>:<arrival>:<number>` for a numbered
-- registration (see `marks`); `<due>` alone (as by hand) is read too.
-- Returns due (false if none), arrival, the text after the due as written
-- (a heartbeat written again reuses it: formatting a number of 16 digits
-- costs more than the rest of the write), and the number, if any.
local function parse_heartbeat(value)
  if not value then
    return false, nil
  end
  -- (A plain find and two subs: a pattern match costs several times more,
  -- once per user of every batch.)
  local colon = string.find(value, ':', 1, true)
  if not colon then
    -- Present but not a number is a heartbeat long past.
    return tonumber(value) or 0, nil
  end
  local text = string.sub(value, colon + 1)
  local due = tonumber(string.sub(value, 1, colon - 1)) or 0
  local second = string.find(text, ':', 1, true)
  if not second then
    return due, tonumber(text), text
  end
  -- `<due>:<arrival>:<number>`: a numbered registration (see `marks`).
  local arrival = tonumber(string.sub(text, 1, second - 1))
  return due, arrival, arrival and text, tonumber(string.sub(text, second + 1))
end

-- Files `user` as a candidate in the bucket ending at `ends`: into lists
-- (ends -> users), written by file_all.
local function file(lists, ends, user)
  local list = lists[ends]
  if not list then
    list = {}
    lists[ends] = list
  end
  list[#list + 1] = user
end

-- Writes the candidates of `lists` and indexes their buckets. Called before
-- the heartbeats themselves are written, so that a call that cannot write
-- a bucket (a Cluster slot being moved) fails before its first write.
local function file_all(dues_key, lists)
  local index = {}
  for ends, users in pairs(lists) do
    local name = int(ends)
    in_chunks(users, function(...) redis.call('RPUSH', dues_key .. ':' .. name, ...) end)
    index[#index + 1] = name
    index[#index + 1] = name
  end
  in_chunks(index, function(...) redis.call('ZADD', dues_key, ...) end)
end

-- Marks: the heartbeats of numbered registrations, eight bytes each (the
-- mark and a tag of the arrival).
--
-- A registration made at the tail is given a dense number: the numbering
-- HASH keeps `base`, the first number (the arrival of the first
-- registration numbered, so that a number is never above its arrival, and
-- numbers after a loss of Redis's data start above every earlier one, as
-- arrivals do) and `next`. Number n's offset is n - base: the STRING marks
-- holds eight bytes there, the mark (a u32) then the registration's
-- arrival mod 2^32 (its tag, a u32), and the STRING arrivals eight (the
-- arrival, an i64). A poll reads both halves of the slot in one `GET i64`
-- (Redis parses each of BITFIELD's operations as text, and a second read a
-- number cost more than the hash lookup marks replace: docs/scale.md); the
-- tag tells whether the number was given at the arrival its credential
-- names. The number is signed into the user's
-- credential and written after the arrival in the heartbeat
-- (`<due>:<arrival>:<number>`), so that a poll far back that brings it reads
-- and writes the mark alone, and a dropout finds it.
--
-- A mark is 0 (none) or the time its heartbeat is due (ms) mod 2^32 (1 for
-- a due time that is 0 mod 2^32, a millisecond later): it tells any due
-- within 24 days of Redis's time, exactly. A user's heartbeat is the later
-- of the mark and the `due` HASH's, and cleanup removes a user only when
-- both are past the cutoff: the dues lists check the mark of a numbered
-- heartbeat, and a scan of the marks (src/store/marks.rs, lua/lapse.lua)
-- the HASH of a stale mark.
local MARK_WRAP = 4294967296

-- BITFIELD's bit offset of the mark at a number's offset, and of its tag.
local function mark_bits(offset)
  return int(offset * 64)
end
local function tag_bits(offset)
  return int(offset * 64 + 32)
end

-- The mark of a heartbeat due at due_ms.
local function mark_of(due_ms)
  local mark = due_ms % MARK_WRAP
  if mark == 0 then
    return 1
  end
  return mark
end

-- When a mark says its heartbeat is due (ms), seen at now_ms; nil for none.
local function mark_due(mark, now_ms)
  if not mark or mark == 0 then
    return nil
  end
  local ahead = (mark - now_ms) % MARK_WRAP
  if ahead >= MARK_WRAP / 2 then
    ahead = ahead - MARK_WRAP
  end
  return now_ms + ahead
end

-- Runs BITFIELD on key with ops (four arguments an op) in chunks of 100.
local function bitfield(key, ops)
  local out = {}
  for i = 1, #ops, 400 do
    local got = redis.call('BITFIELD', key, unpack(ops, i, math.min(i + 399, #ops)))
    for _, v in ipairs(got) do
      out[#out + 1] = v
    end
  end
  return out
end

-- The base of a queue's numbers, or nil while none was given.
local function numbers_base(numbering_key)
  return tonumber(redis.call('HGET', numbering_key, 'base'))
end

-- The marks of numbers (each a number, or false), as read now: a list of
-- the same length (0 where the number has no mark, false where it is
-- below the base or none was given).
local function read_marks(numbering_key, marks_key, numbers)
  local base = numbers_base(numbering_key)
  local get, at, out = {}, {}, {}
  for i = 1, #numbers do
    local n = numbers[i]
    out[i] = false
    if base and n and n >= base then
      get[#get + 1], get[#get + 2], get[#get + 3] = 'GET', 'u32', mark_bits(n - base)
      at[#at + 1] = i
    end
  end
  local j = 0
  for i = 1, #get, 300 do
    local marks = redis.call('BITFIELD_RO', marks_key, unpack(get, i, math.min(i + 299, #get)))
    for _, mark in ipairs(marks) do
      j = j + 1
      out[at[j]] = mark
    end
  end
  return out
end

-- Sets the marks of numbers (n -> mark) at once.
local function write_marks(numbering_key, marks_key, marks)
  local base = numbers_base(numbering_key)
  if not base then
    return
  end
  local ops = {}
  for n, mark in pairs(marks) do
    if n >= base then
      ops[#ops + 1], ops[#ops + 2], ops[#ops + 3], ops[#ops + 4] = 'SET', 'u32', mark_bits(n - base), int(mark)
    end
  end
  bitfield(marks_key, ops)
end

-- The users of `stale` (whose `due` HASH heartbeat is past the cutoff,
-- with values as read) whose mark is past it too, or who have none: a
-- numbered user polled far back lately has a later heartbeat in the mark.
-- And the numbers the values named, by user (into `known`).
local function stale_by_marks(numbering_key, marks_key, stale, values, now_ms, cutoff, known)
  local numbers, any = {}, false
  for i, value in ipairs(values) do
    local _, _, _, number = parse_heartbeat(value)
    numbers[i] = number or false
    if number then
      any = true
      known[stale[i]] = number
    end
  end
  if not any then
    return stale
  end
  local marks = read_marks(numbering_key, marks_key, numbers)
  local out = {}
  for i, user in ipairs(stale) do
    local due = marks[i] and mark_due(marks[i], now_ms)
    if not (due and due >= cutoff) then
      out[#out + 1] = user
    end
  end
  return out
end

-- The number a registration at `arrival` (a waiting score) was given, or
-- nil: a binary search of the arrivals STRING (numbers are given in the
-- order of their arrivals), about log2(n) reads of eight bytes.
-- marks_keys: the numbering HASH, the marks and the arrivals.
local function number_of(marks_keys, arrival)
  local base = marks_keys and numbers_base(marks_keys[1])
  arrival = tonumber(arrival)
  if not base or not arrival then
    return nil
  end
  local lo, hi = 0, math.floor(redis.call('STRLEN', marks_keys[3]) / 8) - 1
  while lo <= hi do
    local mid = math.floor((lo + hi) / 2)
    local at = redis.call('BITFIELD_RO', marks_keys[3], 'GET', 'i64', '#' .. mid)[1]
    if at == arrival then
      return base + mid
    elseif at < arrival then
      lo = mid + 1
    else
      hi = mid - 1
    end
  end
  return nil
end

-- Clears the marks of the registrations at `arrivals` (waiting scores, of
-- users who leave): of `numbers[i]` where the caller read the number with
-- the user's heartbeat and it was given at that arrival, else wherever
-- `number_of` finds it. Every removal from waiting but admission (from the
-- head, where nobody is decided by a mark) goes through it, so that a mark
-- that stays fresh never speaks for a user who left, whatever the `due`
-- HASH held.
local function clear_marks(marks_keys, arrivals, numbers)
  local base = marks_keys and #arrivals > 0 and numbers_base(marks_keys[1])
  if not base then
    return
  end
  local cleared = {}
  for i, arrival in ipairs(arrivals) do
    local number = numbers and numbers[i]
    if number and number >= base then
      local at = redis.call('BITFIELD_RO', marks_keys[3], 'GET', 'i64', '#' .. int(number - base))[1]
      if at ~= tonumber(arrival) then
        number = nil
      end
    else
      number = nil
    end
    number = number or number_of(marks_keys, arrival)
    if number then
      cleared[number] = 0
    end
  end
  if next(cleared) then
    write_marks(marks_keys[1], marks_keys[2], cleared)
  end
end

-- The most numbers a queue's marks hold: the marks and arrivals STRINGs
-- take eight bytes a number each, and Redis refuses an offset past 512 MB. Past it,
-- registrations are not numbered (their polls take the `due` HASH's path)
-- until the numbers start again.
local MAX_NUMBERS = 60000000

-- Numbers a batch's registrations: take(arrival, due_ms, alone) gives the
-- next number (nil for none), and flush() writes the numbers, marks and
-- arrivals taken. `alone`: nobody else waits, so the numbers start again
-- from this arrival (the marks and arrivals of earlier numbers go: their
-- credentials name numbers below the new base, which polls do not read).
-- A number is given only above the last one's arrival, so that arrivals
-- stay in the order of their numbers (`number_of` searches them): a
-- registration the clock or a floor placed at or below it is not numbered.
local function numberer(numbering_key, marks_key, arrivals_key)
  local nb = {}
  local base, first, next_number, last, restart
  local marks, arrivals = {}, {}
  function nb.take(arrival, due_ms, alone)
    if not next_number then
      local v = redis.call('HMGET', numbering_key, 'base', 'next')
      base, next_number = tonumber(v[1]), tonumber(v[2])
      if not base or not next_number or alone then
        base, next_number, restart = arrival, arrival, true
      elseif next_number > base then
        last = redis.call('BITFIELD_RO', arrivals_key, 'GET', 'i64',
          '#' .. int(next_number - 1 - base))[1]
      end
      first = next_number
    end
    if (last and arrival <= last) or next_number - base >= MAX_NUMBERS then
      return nil
    end
    local number = next_number
    next_number, last = next_number + 1, arrival
    local offset = number - base
    marks[#marks + 1], marks[#marks + 2], marks[#marks + 3], marks[#marks + 4] = 'SET', 'u32', mark_bits(offset), int(mark_of(due_ms))
    marks[#marks + 1], marks[#marks + 2], marks[#marks + 3], marks[#marks + 4] = 'SET', 'u32', tag_bits(offset), int(arrival % MARK_WRAP)
    arrivals[#arrivals + 1], arrivals[#arrivals + 2], arrivals[#arrivals + 3], arrivals[#arrivals + 4] = 'SET', 'i64', '#' .. int(offset), int(arrival)
    return number
  end
  -- Written after the batch's places: over `maxmemory` the first write a
  -- script makes that may grow memory is refused, and a removal first would
  -- let every later one through (see register.lua).
  function nb.flush()
    if not next_number or next_number == first then
      return
    end
    if restart then
      redis.call('DEL', marks_key, arrivals_key)
    end
    redis.call('HSET', numbering_key, 'base', int(base), 'next', int(next_number))
    bitfield(arrivals_key, arrivals)
    bitfield(marks_key, marks)
  end
  return nb
end

-- heartbeats(legacy_key, due_key, dues_key, waiting_key, now_ms, pmin, pmax, marks)
-- (marks: {numbering_key, marks_key}, to write the mark of a numbered
-- heartbeat with it; nil where the script has neither) gives:
--   poll_after(wait_ms)     the advice: a quarter of the expected wait, from
--                           pmin to pmax (pmax when the wait is unknown, -1)
--   read(first, last, hashed)  reads the heartbeats of ARGV[first..last] at
--                           once (hashed: the caller's HMGET of them, if it
--                           made one)
--   remember(user, value)   takes a heartbeat the caller read itself
--   put(user, at, value)    writes a heartbeat due `at` as the caller wrote
--                           its value
--   arrival(user)           the arrival read with a user's heartbeat (nil if
--                           none was read)
--   arrive(user, arrival)   the arrival to write from now on
--   due(user)               the heartbeat read (false if none; nil if unread)
--   keep(user, advice)      the advice to give a user who polls, writing the
--                           heartbeat only if the time left is not a fair one
--   set(user, advice, arrival, arrival_text)  the heartbeat of a user, due
--                           after the advice (arrival: the waiting score, if
--                           the caller has it, and its text if made already)
--   at_text(at)             `<at>:`, the start of a heartbeat due at `at`
--   forget(users)           drops the heartbeats of users who leave waiting
--   flush()                 writes what keep and set decided: a script that
--                           calls either calls this before it returns
local function heartbeats(legacy_key, due_key, dues_key, waiting_key, now_ms, pmin, pmax, marks)
  local h, due, arrivals, writes, lists, moved_out = {}, {}, {}, {}, {}, {}
  -- The marks to write with the heartbeats (number -> mark).
  local marked = {}
  local span = math.min(1000, pmin)
  local legacy = redis.call('EXISTS', legacy_key) == 1
  h.legacy = legacy
  function h.poll_after(wait_ms)
    if wait_ms < 0 then
      return pmax
    end
    return math.max(pmin, math.min(pmax, math.floor(wait_ms / 4)))
  end
  -- The later of a HASH and a legacy heartbeat (either may be false).
  local function later(hashed, old)
    old = tonumber(old)
    if old and (not hashed or old > hashed) then
      return old
    end
    return hashed
  end
  local texts, numbers = {}, {}
  local function remember(user, value, old)
    local d, arrival, text, number = parse_heartbeat(value)
    -- The text is reused only if it is a number (a malformed one is
    -- written anew from the waiting set's score).
    due[user], arrivals[user], texts[user] = later(d, old), arrival, arrival and text
    numbers[user] = arrival and number
  end
  function h.read(first, last, hashed)
    hashed = hashed or redis.call('HMGET', due_key, unpack(ARGV, first, last))
    local old = {}
    if legacy then
      old = redis.call('ZMSCORE', legacy_key, unpack(ARGV, first, last))
    end
    for i = first, last do
      remember(ARGV[i], hashed[i - first + 1], old[i - first + 1])
    end
  end
  -- A heartbeat value the caller read (rank.lua reads a batch's with one
  -- HMGET of its own).
  function h.remember(user, value)
    remember(user, value, nil)
  end
  -- Writes a heartbeat due `at` whose value the caller made,
  -- `<at>:<arrival>`.
  function h.put(user, at, value)
    due[user] = at
    if marks then
      local _, _, _, number = parse_heartbeat(value)
      if number then
        marked[number] = mark_of(at)
      end
    end
    file(lists, (math.floor(at / span) + 1) * span, user)
    writes[#writes + 1] = user
    writes[#writes + 1] = value
  end
  function h.arrival(user)
    return arrivals[user]
  end
  -- The number of the user's registration at `arrival`, if it has one
  -- (see `marks`).
  function h.number(user, arrival)
    return arrivals[user] == arrival and numbers[user] or nil
  end
  -- The arrival to write with a user's heartbeat from now on (a score read
  -- from the waiting set outranks the one the heartbeat had).
  function h.arrive(user, arrival)
    if arrivals[user] ~= arrival then
      numbers[user] = nil
    end
    arrivals[user], texts[user] = arrival, nil
  end
  function h.due(user)
    return due[user]
  end
  -- The text `<at>:` that starts a heartbeat due at `at`, made once a call
  -- for each due time: far back every poll of a batch has the same one,
  -- and a number made text costs about as much as the rest of the write.
  local at_texts = {}
  function h.at_text(at)
    local text = at_texts[at]
    if not text then
      text = int(at) .. ':'
      at_texts[at] = text
    end
    return text
  end
  -- A heartbeat due `advice` from now. With `arrival`, of a registration
  -- made now, numbered `number` (or not); else of the one the user has.
  function h.set(user, advice, arrival, arrival_text, number)
    local text = not arrival and texts[user]
    if arrival then
      numbers[user] = number
      if number then
        arrival_text = (arrival_text or int(arrival)) .. ':' .. int(number)
      end
    end
    arrival = arrival or arrivals[user] or tonumber(redis.call('ZSCORE', waiting_key, user))
    if not text and arrival and numbers[user] and not arrival_text then
      arrival_text = int(arrival) .. ':' .. int(numbers[user])
    end
    local at = now_ms + advice
    due[user], arrivals[user] = at, arrival
    if marks and numbers[user] and not number then
      marked[numbers[user]] = mark_of(at)
    end
    file(lists, (math.floor(at / span) + 1) * span, user)
    writes[#writes + 1] = user
    if text then
      writes[#writes + 1] = h.at_text(at) .. text
    elseif arrival then
      texts[user] = nil
      writes[#writes + 1] = h.at_text(at) .. (arrival_text or int(arrival))
    else
      writes[#writes + 1] = int(at)
    end
    if legacy then
      moved_out[#moved_out + 1] = user
    end
  end
  function h.keep(user, advice)
    if due[user] == nil then
      remember(user, redis.call('HGET', due_key, user),
        legacy and redis.call('ZSCORE', legacy_key, user))
    end
    local left = (due[user] or 0) - now_ms
    if left >= math.max(pmin, math.floor(advice / 2))
        and left <= math.min(pmax, advice + math.floor(advice / 4)) then
      return left
    end
    h.set(user, advice)
    return advice
  end
  function h.forget(users)
    in_chunks(users, function(...)
      redis.call('HDEL', due_key, ...)
      if legacy then
        redis.call('ZREM', legacy_key, ...)
      end
    end)
  end
  function h.flush()
    file_all(dues_key, lists)
    in_chunks(writes, function(...) redis.call('HSET', due_key, ...) end)
    in_chunks(moved_out, function(...) redis.call('ZREM', legacy_key, ...) end)
    if next(marked) then
      write_marks(marks[1], marks[2], marked)
    end
    writes, lists, moved_out, marked = {}, {}, {}, {}
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


-- The operator's live settings and the event schedule of a queue, from its
-- control HASH (written by control.lua; absent fields keep the configured
-- values): paused, closed (nobody joins or is admitted; beside it
-- closed_message, the operator's words for the visitors, and closed_at
-- (ms), read where they are shown), batch, interval, max_active (live
-- admission overrides), prequeue_from, open_at (ms), shuffle, placed (the
-- pre-queue has been placed in the waiting queue), floor (the lowest
-- waiting score a registration after the open may take: the placed
-- pre-queue sits below it).
--
-- And the state's own record (see lua/recover.lua): incarnation, the id of
-- the queue's state, absent when Redis has lost it (or never had it: until
-- an instance writes one, register and admit refuse with WAITGATE_LOST);
-- version, counting the operator's changes; lost_at (ms), when the state
-- was last found lost (registrations older than it may be seated again,
-- until reseat_until, if they are after lost_frontier, the admission
-- frontier then: see lua/reseat.lua); held and held_until (ms), slots of
-- max-active held for tokens issued before a loss; rebuild_until (ms):
-- after a loss nobody is admitted before it, while the waiting users come
-- back to be seated again in their order.
local function read_control(key)
  local c = redis.call('HMGET', key, 'paused', 'batch', 'interval', 'max_active',
    'prequeue_from', 'open_at', 'placed', 'floor', 'incarnation', 'version', 'lost_at',
    'held', 'held_until', 'rebuild_until', 'reseat_until', 'lost_frontier', 'closed')
  return {
    paused = c[1] == '1',
    closed = c[17] == '1',
    batch = tonumber(c[2]),
    interval = tonumber(c[3]),
    max_active = tonumber(c[4]),
    prequeue_from = tonumber(c[5]),
    open_at = tonumber(c[6]),
    placed = c[7] == '1',
    floor = tonumber(c[8]),
    incarnation = c[9],
    version = tonumber(c[10]) or 0,
    lost_at = tonumber(c[11]),
    held = tonumber(c[12]) or 0,
    held_until = tonumber(c[13]) or 0,
    rebuild_until = tonumber(c[14]) or 0,
    reseat_until = tonumber(c[15]) or 0,
    lost_frontier = tonumber(c[16]),
  }
end

-- The refusal of a script that must not run on a queue whose state Redis
-- has lost (the instance writes back what it knows, then calls again).
local function lost_reply()
  return redis.error_reply('WAITGATE_LOST the queue state is missing')
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

-- Offsets of a shuffled placement are the first 32 bits of a hash (its
-- first 8 hex digits): the draw, written out in docs/fairness.md and
-- src/fairness/draw.rs. Users with the same offset are ordered by userId, as
-- a sorted set orders equal scores. Each open moves the next arrivals'
-- floor 2^32 past the placement's base: scores reach 2^53, where they are
-- no longer whole numbers, after about 1.7 million opens (a placement that
-- would still cross it keeps the pre-queue's arrival order instead,
-- recorded as shuffle 0).
local DRAW_BITS = 32

-- The queue's name, from one of its keys (queue:{name}:...).
local function queue_of(key)
  return string.match(key, '^queue:{(.*)}:')
end

-- A pre-queued user's offset in a shuffled placement, from the control
-- HASH's `seed`, `shuffle_bits` and `commitment`: SHA-1(seed ":" queue ":"
-- userId) for a draw committed to before its pre-queue opened; an event
-- recorded by an earlier version hashed seed ":" userId, and kept
-- `shuffle_bits` of its first 44 bits.
local function draw_offset(seed, bits, committed, queue, user)
  local hashed = seed .. ':' .. user
  if committed then
    hashed = seed .. ':' .. queue .. ':' .. user
  end
  return math.floor(tonumber(string.sub(redis.sha1hex(hashed), 1, 11), 16) / 2 ^ (44 - bits))
end
local MAX_SCORE = 9007199254740992

-- The highest waiting score admitted (the gate's frontier): no place given
-- from now on may be at or below it, or it would be admitted out of order.
local function admitted_frontier(admission_key)
  return tonumber(redis.call('HGET', admission_key, 'frontier')) or 0
end

-- Starts placing an event's pre-queue, once (whichever call comes first,
-- an admission or a registration after open_at): everyone already waiting
-- stays ahead; the pre-queue gets the scores from `base` up; everyone who
-- registers from now on gets a score at or above `floor`, behind it.
-- Returns base, floor.
local function start_placing(control_key, waiting_key, prequeue_key, admission_key, now)
  local c = redis.call('HMGET', control_key, 'base', 'floor', 'shuffle')
  if c[1] then
    return tonumber(c[1]), tonumber(c[2])
  end
  -- Behind everyone waiting and everyone admitted: after a shuffled open,
  -- arrivals count on from its floor, ahead of the clock, and may all have
  -- been admitted by the next open.
  local tail = redis.call('ZRANGE', waiting_key, -1, -1, 'WITHSCORES')
  local base = math.max(now, (tonumber(tail[2]) or 0) + 1, admitted_frontier(admission_key) + 1)
  local count = redis.call('ZCARD', prequeue_key)
  local span, bits = count, 0
  if c[3] == '1' then
    bits = DRAW_BITS
    span = 2 ^ bits
    if base + span >= MAX_SCORE then
      span, bits = count, 0
      redis.call('HSET', control_key, 'shuffle', '0')
    end
  end
  redis.call('HSET', control_key, 'base', int(base), 'floor', int(base + span),
    'opened_at', int(math.floor(now / 1000)), 'prequeued', count, 'shuffle_bits', bits)
  return base, base + span
end

-- Takes the stale users (a list, each once) out of waiting, and a placed
-- one's pre-queue entry with them; a pre-queue entry of anyone else is a
-- registration of its own, and stays. Counts and logs the departures (see
-- `departed`), clears their marks (marks_keys: the numbering HASH, the
-- marks and the arrivals; known: the numbers their heartbeats named, by
-- user, if read; see `clear_marks`), and returns how many were waiting.
local function remove_waiting(waiting_key, prequeue_key, admission_key, stale, marks_keys, known)
  local waited, arrivals, numbers = {}, {}, {}
  for i = 1, #stale, 500 do
    local last = math.min(i + 499, #stale)
    local scores = redis.call('ZMSCORE', waiting_key, unpack(stale, i, last))
    for j = 1, last - i + 1 do
      if scores[j] then
        waited[#waited + 1] = stale[i + j - 1]
        arrivals[#arrivals + 1] = scores[j]
        numbers[#arrivals] = known and known[stale[i + j - 1]] or false
      end
    end
  end
  local placed = redis.call('EXISTS', prequeue_key) == 1
  in_chunks(waited, function(...)
    redis.call('ZREM', waiting_key, ...)
    if placed then
      redis.call('ZREM', prequeue_key, ...)
    end
  end)
  departed(admission_key, arrivals)
  clear_marks(marks_keys, arrivals, numbers)
  return #waited
end

-- Removes up to `batch` active entries past their expiry, with their
-- credentials; returns how many.
local function expire_active(active_key, credential_key, now_ms, batch)
  local expired = redis.call('ZRANGEBYSCORE', active_key, '-inf', int(now_ms), 'LIMIT', 0, batch)
  in_chunks(expired, function(...)
    redis.call('ZREM', active_key, ...)
    redis.call('HDEL', credential_key, ...)
  end)
  return #expired
end

-- The first bucket of heartbeat candidates that ended at or before
-- `cutoff` (its end, as stored), or nil.
local function past_bucket(dues_key, cutoff)
  return redis.call('ZRANGEBYSCORE', dues_key, '-inf', int(cutoff), 'LIMIT', 0, 1)[1]
end

-- Outage grace. A waiting user is removed only once their heartbeat is
-- `timeout` past while polls could succeed: time when no instance could
-- reach Redis does not count, nor the `grace` after it that clients take
-- to come back (they back off on 503, up to 8 s). Every instance stamps the
-- queue as seen (`alive` in the admission HASH) each second, and cleanup at
-- each step; a gap of more than OUTAGE_GAP_MS (or the heartbeat timeout,
-- if shorter, but at least 1.5 s) between two stamps is an
-- outage (Redis down, hung, restarting or failing over, or no instance
-- running), recorded as the window [last stamp, now + grace] in `outages`
-- (`<start>-<end>` by start, comma-separated). Windows that meet merge.
--
-- Time counted is then a clock that stops in the windows: a heartbeat due
-- at `d` is stale when more than `timeout` of counted time lies between
-- `d` and now. The cutoff is found walking back from now through the
-- windows, spending `timeout` on the time between them. A window older
-- than the cutoff can no longer change any decision (every later cutoff
-- is later still), and is dropped.
local OUTAGE_GAP_MS = 3000
local MAX_OUTAGES = 16

local function read_outages(text)
  local list = {}
  for s, e in string.gmatch(text or '', '(%d+)%-(%d+)') do
    list[#list + 1] = {tonumber(s), tonumber(e)}
  end
  return list
end

local function outages_text(list)
  local parts = {}
  for i, w in ipairs(list) do
    parts[i] = int(w[1]) .. '-' .. int(w[2])
  end
  return table.concat(parts, ',')
end

-- The cutoff (ms) below which a heartbeat is stale at now_ms, and the index
-- of the oldest window that still matters.
local function cutoff_through(list, now_ms, timeout)
  local t, budget = now_ms, timeout
  for i = #list, 1, -1 do
    local s, e = list[i][1], list[i][2]
    if e < t then
      if t - e >= budget then
        return t - budget, i + 1
      end
      budget = budget - (t - e)
    end
    if s < t then
      t = s
    end
  end
  return t - budget, 1
end

-- Stamps the queue as seen at now_ms, records the gap since the last stamp
-- as an outage when it is one (kind 'outage', its length, in the incident
-- fields the admin API shows), and returns the cutoff for heartbeats of
-- `timeout` and the gap recorded (0 if none). `extra` holds more fields
-- for the same HSET.
local function outage_cutoff(admission_key, now_ms, timeout, grace, extra)
  local g = redis.call('HMGET', admission_key, 'alive', 'outages')
  local alive, list = tonumber(g[1]), read_outages(g[2])
  local changed, gap = false, 0
  -- (With a timeout shorter than 3 s, a shorter gap is one already; never
  -- under 1.5 s, the stamps being a second apart.)
  local gap_ms = math.max(1500, math.min(OUTAGE_GAP_MS, timeout))
  if alive and now_ms - alive > gap_ms then
    gap = now_ms - alive
    local last = list[#list]
    if last and last[2] >= alive then
      last[2] = math.max(last[2], now_ms + grace)
    else
      list[#list + 1] = {alive, now_ms + grace}
    end
    if #list > MAX_OUTAGES then
      -- Too many to keep: the two oldest become one (more lenient).
      list[2][1] = list[1][1]
      table.remove(list, 1)
    end
    changed = true
  end
  local cutoff, first = cutoff_through(list, now_ms, timeout)
  if first > 1 then
    local kept = {}
    for i = first, #list do
      kept[#kept + 1] = list[i]
    end
    list, changed = kept, true
  end
  local record = extra or {}
  record[#record + 1] = 'alive'
  record[#record + 1] = int(now_ms)
  if changed then
    record[#record + 1] = 'outages'
    record[#record + 1] = outages_text(list)
  end
  if gap > 0 then
    for _, v in ipairs({'incident', 'outage', 'incident_at', int(now_ms), 'incident_ms',
        int(gap)}) do
      record[#record + 1] = v
    end
  end
  redis.call('HSET', admission_key, unpack(record))
  return cutoff, gap
end

-- A closed queue keeps its waiting users' places while nobody polls: the
-- closure is an outage window (see `outage_cutoff`) whose end stays open,
-- CLOSED_UNTIL, until the reopen ends it `grace` later. So neither the
-- time closed nor the grace after the reopen counts against any heartbeat.
-- The open window is always the last: every later outage merges into it.
local CLOSED_UNTIL = 9007199254740992

local function hold_heartbeats(admission_key, now_ms)
  local list = read_outages(redis.call('HGET', admission_key, 'outages'))
  local last = list[#list]
  if last and last[2] == CLOSED_UNTIL then
    return
  end
  if last and last[2] >= now_ms then
    last[2] = CLOSED_UNTIL
  else
    list[#list + 1] = {now_ms, CLOSED_UNTIL}
    if #list > MAX_OUTAGES then
      list[2][1] = list[1][1]
      table.remove(list, 1)
    end
  end
  redis.call('HSET', admission_key, 'outages', outages_text(list))
end

local function release_heartbeats(admission_key, now_ms, grace)
  local list = read_outages(redis.call('HGET', admission_key, 'outages'))
  local last = list[#list]
  if last and last[2] == CLOSED_UNTIL then
    last[2] = now_ms + grace
    redis.call('HSET', admission_key, 'outages', outages_text(list))
  end
end

-- Which registration of `user` a credential naming `arrival` (µs) is, as
-- dropout.lua and current.lua read it: 'waiting' (the current one, waiting
-- or pre-queued), 'active' (the one admitted), 'earlier' (the user's
-- current registration is another), or nil (not queued). A placed
-- pre-queue user's credential names its pre-queue arrival (`prequeue`
-- keeps it until admission); anyone else's, its score in waiting; an
-- admitted one's, the arrival `credential` recorded at admission.
local function registration_of(waiting, prequeue, credential, user, arrival)
  local prequeued = redis.call('ZSCORE', prequeue, user)
  local waits = redis.call('ZSCORE', waiting, user)
  if waits or prequeued then
    if tonumber(prequeued or waits) ~= arrival then
      return 'earlier'
    end
    return 'waiting'
  end
  local admitted = redis.call('HGET', credential, user)
  if not admitted then
    return nil
  end
  if tonumber(admitted) ~= arrival then
    return 'earlier'
  end
  return 'active'
end
