-- register: put each user of a batch at the tail of the waiting queue, once,
-- in the batch's order; or, before a scheduled open, in the pre-queue.
-- Concurrent registrations for one queue on one instance share a call
-- (src/store/coalesce.rs); a lone one is a batch of one.
--
-- KEYS[1] waiting ZSET    (userId -> arrival order, microseconds)
-- KEYS[2] heartbeat ZSET  (of earlier versions: see `heartbeats` in lib.lua)
-- KEYS[3] credential HASH (userId -> arrival; admitted users only)
-- KEYS[4] active ZSET     (userId -> active-state expiry, ms)
-- KEYS[5] admission HASH  (the gate's record, for the wait estimate)
-- KEYS[6] control HASH    (live settings and the event, see lib.lua)
-- KEYS[7] prequeue ZSET   (userId -> arrival, microseconds)
-- KEYS[8] due HASH        (userId -> when the next poll is due, ms), KEYS[9]
--                          dues ZSET (its buckets): see `heartbeats`
-- KEYS[10] proofs ZSET    (id -> its expiry, ms): proofs of work and invites
--                          that bought a place
-- KEYS[11] numbering HASH, KEYS[12] marks STRING, KEYS[13] arrivals STRING
--                          (the numbers of registrations: see `marks` in lib.lua)
-- ARGV[1] admission interval (ms), ARGV[2] admission batch size
-- ARGV[3] heartbeat timeout (ms), ARGV[4], ARGV[5] the bounds of the poll
--         advice (ms)
-- ARGV[6] 1 to number the registrations made at the tail (see `marks` in
--         lib.lua), 0 not to
-- ARGV[7] p, how many proofs of work and invites the batch carries (a user
--         may carry one of each); then p triples: the user's place in the
--         batch (from 1), the proof's id, its expiry (ms)
-- ARGV[8+3p..] userIds, 1 to 500
--
-- Returns, for each user in order, six numbers: four below, the poll
-- advice (ms; 0 where there is no place to poll) and the registration's
-- number (0 for none: see `marks` in lib.lua; given, with ARGV[6] 1, to
-- registrations made at the tail once the queue is open):
--         {1, rank, wait_ms, arrival}  registered now (rank = users ahead);
--                                      waitgate signs the arrival into the
--                                      queueCredential (src/queue_api/credential.rs)
--         {2, rank, wait_ms, arrival}  already waiting: place kept
--         {3, expiry, 0, arrival}      already active until expiry (ms), with
--                                      the admitted registration's arrival
--         {4, opens_in_ms, c, arrival} already pre-queued, since arrival
--         {5, opens_in_ms, c, arrival} pre-queued now (0: opening now)
--                                      (c: when the draw the user joined was
--                                      committed to, ms; 0 for none)
--         {6, opens_at_ms, 0, 0}       registration opens at opens_at_ms
--         {7, 0, 0, 0}                 the queue is closed (control.lua): nobody
--                                      joins, and a place already had is kept
--                                      as it is (an active user is told 3)
--         {8, 0, 0, 0}                 the user's proof of work was spent
--                                      already (or its challenge expired by
--                                      Redis's clock), and the user has no
--                                      place: nothing is done
--         {9, 0, 0, 0}                 the same for the user's invite
-- wait_ms is -1 while admission is paused.
-- Codes: 1 new, 2 already-waiting, 3 active, 4 already-prequeued, 5 prequeued-now,
-- Codes: 6 not-open, 7 closed, 8 proof-spent, 9 invite-spent
--
-- A waiting user costs a sorted-set entry, a hash field and a place in a
-- list. A proof of work costs an entry in the proofs set until its challenge
-- expires: the set holds at most the places taken in one challenge lifetime.
local interval, batch = tonumber(ARGV[1]), tonumber(ARGV[2])
local timeout, pmin, pmax = heartbeat_args(3)
local numbered = ARGV[6] == '1'
local proofs = tonumber(ARGV[7])
-- The first user's ARGV index, and a user's place in the batch from it.
local first = 8 + 3 * (proofs or 0)
local count = proofs and batch_users(first)
if #KEYS ~= 13 or (ARGV[6] ~= '0' and ARGV[6] ~= '1') or not interval or interval < 1 or not batch or batch < 1 or not timeout
    or not count or proofs < 0 or proofs > 2 * count then
  return redis.error_reply('ERR waitgate register: bad arguments')
end
local now = now_us()
local now_ms = math.floor(now / 1000)
-- The proofs of each user that carries some, by place in the batch.
local proofs_of = {}
for j = 0, proofs - 1 do
  local place, id, expiry = tonumber(ARGV[8 + 3 * j]), ARGV[9 + 3 * j], tonumber(ARGV[10 + 3 * j])
  -- An expiry past a year and a month is not one waitgate checked (and
  -- would not print as an integer).
  if not place or place < 1 or place > count or #id == 0 or #id > 80 or not expiry
      or expiry > now_ms + 34000000000 then
    return redis.error_reply('ERR waitgate register: bad arguments')
  end
  proofs_of[place] = proofs_of[place] or {}
  table.insert(proofs_of[place], {id, expiry})
end
local control = read_control(KEYS[6])
if not control.incarnation then
  -- The floor of a placed pre-queue may be among what was lost: nobody
  -- joins until the instance has written back what it knows.
  return lost_reply()
end
if control.closed then
  -- Nothing is written: a waiting user's place stays where it is (the
  -- closure holds the heartbeats), an admitted one is still told so.
  local out = {}
  local expiries = redis.call('ZMSCORE', KEYS[4], unpack(ARGV, first, #ARGV))
  for i = first, #ARGV do
    local expiry = tonumber(expiries[i - first + 1])
    if expiry and expiry > now_ms then
      for _, n in ipairs({3, expiry, 0, tonumber(redis.call('HGET', KEYS[3], ARGV[i]) or '0'),
          0, 0}) do
        out[#out + 1] = n
      end
    else
      for _, n in ipairs({7, 0, 0, 0, 0, 0}) do
        out[#out + 1] = n
      end
    end
  end
  return out
end
local phase = event_phase(control, now_ms)
interval, batch = control.interval or interval, control.batch or batch

local wait_of = wait_estimator(KEYS[5], now_ms, interval, batch)
local function estimate(rank)
  if control.paused then
    return -1
  end
  return wait_of(rank)
end

-- Strictly increasing scores with no ties: the arrival time in microseconds,
-- bumped past the set's tail when two arrive in the same microsecond or the
-- clock steps back, and never below `low`. Scores stay below 2^53, so
-- doubles hold them exactly. The tail is read once per set and batch, then
-- kept here as this batch adds to it.
local tails = {}
-- A place in the waiting set is also above the gate's frontier (read once a
-- batch): after a shuffled open arrivals count on from its floor, ahead of
-- the clock, and a clock that steps back would otherwise place a newcomer
-- ahead of users admitted already.
local above_admitted
local function next_score(key, low)
  if key == KEYS[1] then
    above_admitted = above_admitted or admitted_frontier(KEYS[5]) + 1
    low = math.max(low or 0, above_admitted)
  end
  local score = math.max(now, low or 0)
  local tail = tails[key]
  if not tail then
    local last = redis.call('ZREVRANGE', key, 0, 0, 'WITHSCORES')
    tail = tonumber(last[2]) or 0
  end
  if tail >= score then
    score = tail + 1
  end
  tails[key] = score
  return score
end

local opens_in = math.max(0, (control.open_at or now_ms) - now_ms)
-- When the draw a pre-queued user joins was committed to (ms; 0 for none):
-- waitgate signs the commitment of that time into the user's receipt.
local function committed_at()
  if phase ~= 'prequeue' then
    return 0
  end
  return tonumber(redis.call('HGET', KEYS[6], 'committed_at')) or 0
end
local joined = 0
local beats = heartbeats(KEYS[2], KEYS[8], KEYS[9], KEYS[1], now_ms, pmin, pmax,
  {KEYS[11], KEYS[12]})
local numbers = numbered and numberer(KEYS[11], KEYS[12], KEYS[13])
-- The number of the registration each call of `register` below answered.
local number = 0

-- Once the queue is open, most of a batch are new users. For them the
-- batch reads the waiting and active scores of all its users with one call
-- each and adds them to the waiting set with one call at the end: a call
-- from Lua costs about as much as the work it does, and a new user made four
-- (ZRANK, ZSCORE, ZADD, ZCARD). Anyone else, and a user named twice in a
-- batch, takes the path below, after the adds so far are written.
local open = phase == 'open'
local waiting_scores, active_scores
if open then
  waiting_scores = redis.call('ZMSCORE', KEYS[1], unpack(ARGV, first, #ARGV))
  active_scores = redis.call('ZMSCORE', KEYS[4], unpack(ARGV, first, #ARGV))
end
-- The adds not written yet (score, user, ...), every user this batch
-- added, and the size of the waiting set with the batch's adds (once open,
-- the path below adds nobody: who takes it is waiting or active already).
local adds, added, size = {}, {}, nil

-- An active state that ran out but was not cleaned up yet, with the
-- credential entry of that earlier registration. Forgotten only after the
-- user is added: over `maxmemory` Redis refuses a script's first write that
-- may grow memory, but a removal first would make every later write of the
-- call allowed, so a full Redis would take the registration.
local function forget_active(user)
  redis.call('ZREM', KEYS[4], user)
  redis.call('HDEL', KEYS[3], user)
end
-- The batch's users whose run-out active state goes with their adds.
local ran_out = {}
local function write_adds()
  in_chunks(adds, function(...) redis.call('ZADD', KEYS[1], ...) end)
  adds = {}
  for _, user in ipairs(ran_out) do
    forget_active(user)
  end
  ran_out = {}
end

local function join(user, i)
  if active_scores[i] then
    ran_out[#ran_out + 1] = user
  end
  if not tails[KEYS[1]] then
    before_adding(KEYS[5], KEYS[1], now)
  end
  size = (size or redis.call('ZCARD', KEYS[1])) + 1
  local score = next_score(KEYS[1], control.floor)
  local score_text = int(score)
  adds[#adds + 1] = score_text
  adds[#adds + 1] = user
  added[user] = true
  joined = joined + 1
  local rank = size - 1
  local wait = estimate(rank)
  local advice = beats.poll_after(wait)
  local n = numbers and numbers.take(score, now_ms + advice, size == 1)
  beats.set(user, advice, score, score_text, n)
  number = n or 0
  return 1, rank, wait, score, advice
end

local function register(user, i)
  if open and not added[user] and not waiting_scores[i] then
    local expiry = active_scores[i]
    if not (expiry and tonumber(expiry) > now_ms) then
      return join(user, i)
    end
  end
  write_adds()
  local rank = redis.call('ZRANK', KEYS[1], user)
  if rank then
    -- Registering again is a sign of life too; its heartbeat names the
    -- place the user has (whoever wrote the last one).
    local place = redis.call('ZSCORE', KEYS[1], user)
    beats.arrive(user, tonumber(place))
    if phase ~= 'open' then
      -- Waiting from before this event (an earlier one placed them): they
      -- keep that place, and are in no draw of this one.
      local advice = beats.keep(user, beats.poll_after(opens_in))
      return 4, opens_in, 0, tonumber(redis.call('ZSCORE', KEYS[7], user) or place), advice
    end
    local wait = estimate(rank)
    local advice = beats.keep(user, beats.poll_after(wait))
    -- The arrival too: with identity binding, a second device of the same
    -- signed-in user is given the credential of this registration. A placed
    -- pre-queue user's arrival is their pre-queue score (their waiting score
    -- is the place the shuffle gave them), as admission and dropout read it.
    local arrival = redis.call('ZSCORE', KEYS[7], user) or place
    if arrival == place then
      number = beats.number(user, tonumber(place)) or 0
    end
    return 2, rank, wait, tonumber(arrival), advice
  end
  local prequeued_at = phase ~= 'open' and redis.call('ZSCORE', KEYS[7], user)
  if prequeued_at then
    return 4, opens_in, committed_at(), tonumber(prequeued_at), beats.poll_after(opens_in)
  end

  local expiry = redis.call('ZSCORE', KEYS[4], user)
  if expiry and tonumber(expiry) > now_ms then
    -- The arrival of the admitted registration too (with identity binding, a
    -- second device of the signed-in user is given its credential).
    return 3, tonumber(expiry), 0, tonumber(redis.call('HGET', KEYS[3], user) or '0'), 0
  end
  if phase == 'scheduled' then
    return 6, control.prequeue_from, 0, 0, 0
  end
  if phase == 'prequeue' then
    local score = next_score(KEYS[7])
    redis.call('ZADD', KEYS[7], int(score), user)
    if expiry then
      forget_active(user)
    end
    return 5, opens_in, committed_at(), score, beats.poll_after(opens_in)
  end

  -- After the open (or while the pre-queue is being placed), everyone who
  -- arrives is behind every pre-queued user: at or above the floor.
  local floor = control.floor
  if phase == 'placing' then
    -- Before the first placing step, this registration starts the placing,
    -- so that it cannot land ahead of the pre-queue.
    floor = select(2, start_placing(KEYS[6], KEYS[1], KEYS[7], KEYS[5], now))
  end
  if not tails[KEYS[1]] then
    before_adding(KEYS[5], KEYS[1], now)
  end
  local score = next_score(KEYS[1], floor)
  redis.call('ZADD', KEYS[1], int(score), user)
  if expiry then
    forget_active(user)
  end
  joined = joined + 1
  if phase == 'placing' then
    beats.set(user, pmin, score)
    return 5, 0, 0, score, pmin
  end
  rank = redis.call('ZCARD', KEYS[1]) - 1
  local wait = estimate(rank)
  local advice = beats.poll_after(wait)
  beats.set(user, advice, score)
  return 1, rank, wait, score, advice
end

-- A proof of work (or an invite) buys one place. It is refused when used already, or
-- expired by this Redis's clock (an instance whose clock is behind would
-- take it a moment longer; Redis's clock decides, as for everything else).
-- It is recorded, until its challenge expires, only once it bought a place
-- (a new registration, or a new pre-queue entry): a user who was waiting
-- already, admitted, or found the queue not open or closed keeps it for a
-- later try.
local newest = 0
-- The code for a user whose proof or invite is spent (8 a proof, 9 an
-- invite: their ids start with 'invite:'), or nil.
local function spent_code(i)
  local proofs_of_user = proofs_of[i]
  if not proofs_of_user then
    return nil
  end
  for _, proof in ipairs(proofs_of_user) do
    if proof[2] <= now_ms or redis.call('ZSCORE', KEYS[10], proof[1]) then
      return string.sub(proof[1], 1, 7) == 'invite:' and 9 or 8
    end
  end
  return nil
end
-- Whether a user has a place or is admitted: they are answered as such,
-- whatever they carry, so that a client that lost the answer of the
-- register that spent its invite can ask again.
local function placed(user)
  if redis.call('ZSCORE', KEYS[1], user) or redis.call('ZSCORE', KEYS[7], user) then
    return true
  end
  local expiry = tonumber(redis.call('ZSCORE', KEYS[4], user))
  return expiry ~= nil and expiry > now_ms
end
local function spend(i)
  if not proofs_of[i] then
    return
  end
  for _, proof in ipairs(proofs_of[i]) do
    redis.call('ZADD', KEYS[10], proof[2], proof[1])
    newest = math.max(newest, proof[2])
  end
end

local out = {}
for i = 1, count do
  local code, value, wait, arrival, advice = spent_code(i), 0, 0, 0, 0
  number = 0
  if code and placed(ARGV[first + i - 1]) then
    code = nil
  end
  if not code then
    code, value, wait, arrival, advice = register(ARGV[first + i - 1], i)
    if code == 1 or code == 5 then
      spend(i)
    end
  end
  out[#out + 1] = code
  out[#out + 1] = value
  out[#out + 1] = wait
  out[#out + 1] = arrival
  out[#out + 1] = advice
  out[#out + 1] = number
end
write_adds()
beats.flush()
if numbers then
  numbers.flush()
end
counted(KEYS[5], 'joined', joined)
-- Last, after every write that may grow memory (see forget_active): the
-- proofs whose challenge expired go, each once; and the set is given the
-- latest expiry of its proofs, so that it goes by itself once proofs are
-- turned off.
if newest > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[10], '-inf', now_ms)
  if redis.call('PEXPIRETIME', KEYS[10]) < newest then
    redis.call('PEXPIREAT', KEYS[10], newest)
  end
end
return out
