#!/usr/bin/env bash
# Where the Redis time of a poll far back goes, at 1,000,000 waiting, with
# nothing else running: the floors under rank.lua, measured on one Redis.
#
#   scripts/poll-profile.sh             # 1,000,000 users, 3 rounds
#   scripts/poll-profile.sh 200000 5    # fewer users, more rounds
#   POLL_PROFILE_BASELINE=a13ab1b^ scripts/poll-profile.sh
#                                       # and rank.lua as it was at a git
#                                       # revision, on the same fills
#
# Users and their heartbeats are written straight into Redis, in the form
# the scripts write them (waiting score, `<due>:<arrival>`); half have a
# heartbeat a poll keeps, half one it must write. Each round fills anew and
# times batches of 200 random users (as the coalescer sends them at 1,024
# connections), one script or command per batch, from INFO commandstats:
#
#   HMGET command    the heartbeats of a batch read as a plain command:
#                    the hash lookups alone
#   HMGET from Lua   the same, from a script that returns them: the call,
#                    the users as Lua strings and the values back
#   + parse          and each value read as due and arrival
#   rank.lua         the shipped script (derived ranks far back, the
#                    heartbeat written when due)
#   a batch's fixed  per call: a script call doing nothing but define
#   cost             lib.lua's helpers, and rank.lua with no users (what
#                    every rank call pays before its users), also by Redis
#                    CPU (INFO cpu), and by part: each of the reads rank.lua
#                    makes before its users, alone in a script of its own
#   cleanup look     cleanup.lua over 100,000 candidates whose users polled
#                    since (nobody is removed), per candidate
#   cleanup removals cleanup.lua calls that each remove 500 users made
#                    silent at random places, as scripts/scale.sh times
#                    them: each call's time (SLOWLOG) and the ZREM, HDEL
#                    and HMGET inside it (INFO commandstats)
#
# scripts/scale.sh measures the same scripts under load, with waitgate and
# the load driver sharing the machine's cores with Redis.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-tools.sh
ensure_packages redis-server python3

users=${1:-1000000}
rounds=${2:-3}
baseline=${POLL_PROFILE_BASELINE:-}
if [ -n "$baseline" ]; then
  git cat-file -e "$baseline:lua/rank.lua" 2>/dev/null ||
    { echo "POLL_PROFILE_BASELINE: no lua/rank.lua at $baseline" >&2; exit 1; }
fi
port=19311
work=$(mktemp -d)
cleanup() {
  redis-cli -p $port shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
redis-server --port $port --bind 127.0.0.1 --save "" --appendonly no --dir "$work" --daemonize yes \
  --logfile "$work/redis.log"
for _ in $(seq 100); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done

python3 - "$port" "$users" "$rounds" "$baseline" <<'EOF'
import random, statistics, subprocess, sys, time
sys.path.insert(0, "scripts")
import resp

port, users, rounds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
baseline = sys.argv[4]
BATCH, CALLS, CANDIDATES = 200, 1000, 100000
K = "queue:{big}:"


class Redis(resp.Redis):
    def usec(self, command):
        return self.commandstats().get(command, 0)


r = Redis(port)
lib = open("lua/lib.lua").read()
FILL = """
local base, now, from, to = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local z, h = {}, {}
for i = from, to - 1 do
  local score = base + i
  z[#z + 1] = string.format('%.0f', score)
  z[#z + 1] = 'u' .. i
  -- Half keep their heartbeat (20 s left of a 30 s advice), half write one.
  local due = now + ((i % 2 == 0) and -20000 or 20000)
  h[#h + 1] = 'u' .. i
  h[#h + 1] = string.format('%.0f:%.0f', due, score)
  if #z >= 1000 or i == to - 1 then
    redis.call('ZADD', KEYS[1], unpack(z))
    redis.call('HSET', KEYS[2], unpack(h))
    z, h = {}, {}
  end
end
"""
BASE = 1_700_000_000_000_000


def fill():
    r("FLUSHALL")
    now = int(time.time() * 1000)
    for start in range(0, users, 50000):
        r("EVAL", FILL, 2, K + "waiting", K + "due", BASE, now, start, min(users, start + 50000))
    # The gate holds (nobody admitted), as in scripts/scale.sh.
    r("HSET", K + "admission", "window", 999999999999, "window_ms", 3000, "epoch", 1, "joined", users)


def load(body):
    return r("SCRIPT", "LOAD", lib + "\n" + body)


HMGET_LUA = load("return redis.call('HMGET', KEYS[7], unpack(ARGV, 9, #ARGV))")
PARSE_LUA = load("""
local values = redis.call('HMGET', KEYS[7], unpack(ARGV, 9, #ARGV))
local out = {}
for i = 1, #values do
  local due, arrival = parse_heartbeat(values[i])
  out[#out + 1] = due or 0
  out[#out + 1] = arrival or 0
end
return out
""")
# A heartbeat written without reading anything first, as an instance that
# knows each user's arrival (from the credential, or from its earlier
# answer) could ask: every user of the batch is due at the same time.
BLIND_LUA = load("""
local due = math.floor(now_us() / 1000) + 30000
local fields = {}
for i = 9, #ARGV, 2 do
  fields[#fields + 1] = ARGV[i]
  fields[#fields + 1] = due .. ':' .. ARGV[i + 1]
end
redis.call('HSET', KEYS[7], unpack(fields))
local users = {}
for i = 9, #ARGV, 2 do
  users[#users + 1] = ARGV[i]
end
redis.call('RPUSH', KEYS[8] .. ':' .. due, unpack(users))
return #users
""")
RANK = load(open("lua/rank.lua").read())
RANK_BASE = None
BASE_RANK_TEXT = ""
if baseline:
    def at(path):
        return subprocess.run(["git", "show", f"{baseline}:{path}"], check=True,
                              capture_output=True, text=True).stdout
    BASE_RANK_TEXT = at("lua/rank.lua")
    RANK_BASE = r("SCRIPT", "LOAD", at("lua/lib.lua") + "\n" + BASE_RANK_TEXT)
    CLEANUP_BASE = r("SCRIPT", "LOAD", at("lua/lib.lua") + "\n" + at("lua/cleanup.lua"))
CLEANUP = load(open("lua/cleanup.lua").read())
RANK_KEYS = [K + k for k in ("waiting", "heartbeat", "active", "admission", "control",
                             "prequeue", "due", "dues", "numbering", "marks")]
CLEAN_KEYS = [K + k for k in ("waiting", "heartbeat", "credential", "active", "prequeue",
                              "admission", "due", "dues", "numbering", "marks", "arrivals")]


def batches(seed):
    rng = random.Random(seed)
    return [[f"u{rng.randrange(users)}" for _ in range(BATCH)] for _ in range(CALLS)]


def per_poll(command, make):
    r("CONFIG", "RESETSTAT")
    r.pipeline([make(b) for b in batches(7)])
    return r.usec(command) / (BATCH * CALLS)


def with_arrivals(batch):
    return [x for u in batch for x in (u, BASE + int(u[1:]))]


def rank_args(sha):
    # Ranks derived from place 10,000 on, exact nearer (as an instance
    # with samples asks), the default advice bounds and a 30 s timeout;
    # no departures asked for (a baseline from before the departure log
    # takes no ninth argument).
    asked = [] if sha == RANK_BASE and "ARGV[9] the departures" not in BASE_RANK_TEXT else [-1]
    return lambda b: (["EVALSHA", sha, len(RANK_KEYS)] + RANK_KEYS
                      + [3000, 100, 30000, 1000, 30000, BASE + 10000, BASE + users, 1000]
                      + asked + b)


# Cleanup's heartbeat timeout: an hour, so that the heartbeats the fill
# wrote stay live however long a round takes (a user made silent has one
# long past any timeout).
TIMEOUT = 3_600_000
# The outage grace (heartbeat.outage-grace-ms's default).
GRACE = 10_000


def cleanup_look(script=None):
    script = script or CLEANUP
    rng = random.Random(3)
    picked = [f"u{rng.randrange(users)}" for _ in range(CANDIDATES)]
    for i in range(0, CANDIDATES, 1000):
        r("RPUSH", K + "dues:1000", *picked[i:i + 1000])
    r("ZADD", K + "dues", 1000, 1000)
    r("CONFIG", "RESETSTAT")
    # (A baseline from before the outage grace takes no third setting.)
    settings = (500, TIMEOUT) if script != CLEANUP else (500, TIMEOUT, GRACE)
    while r("EXISTS", K + "dues:1000"):
        removed = r("EVALSHA", script, len(CLEAN_KEYS), *CLEAN_KEYS, *settings)[0]
        assert removed == 0, "cleanup removed a user who polled"
    return r.usec("evalsha") / CANDIDATES, r.usec("hmget") / CANDIDATES


def cleanup_look_plain():
    """The same look as plain commands, the decision left to the caller:
    each 500 candidates popped (LPOP) and their heartbeats read (HMGET)."""
    rng = random.Random(3)
    picked = [f"u{rng.randrange(users)}" for _ in range(CANDIDATES)]
    for i in range(0, CANDIDATES, 1000):
        r("RPUSH", K + "dues:1001", *picked[i:i + 1000])
    r("CONFIG", "RESETSTAT")
    while True:
        popped = r("LPOP", K + "dues:1001", 500)
        if not popped:
            break
        r("HMGET", K + "due", *popped)
    stats = r.commandstats()
    return (stats.get("lpop", 0) + stats.get("hmget", 0)) / CANDIDATES


SILENCE = """
math.randomseed(tonumber(ARGV[2]))
local n = 0
while n < 500 do
  local u = 'u' .. math.random(0, tonumber(ARGV[1]) - 1)
  local due = redis.call('HGET', KEYS[1], u)
  if due and due ~= '1' then
    redis.call('HSET', KEYS[1], u, 1)
    redis.call('RPUSH', KEYS[2] .. ':1000', u)
    n = n + 1
  end
end
redis.call('ZADD', KEYS[2], 1000, 1000)
"""


def cleanup_removals(calls=10):
    """cleanup.lua calls that each remove 500 users made silent at random
    places (as scripts/scale.sh times them): each call's own time
    (SLOWLOG), and the mean per call of the commands inside it."""
    rng = random.Random(11 + len(removals))
    times, inside = [], {}
    r("CONFIG", "SET", "slowlog-log-slower-than", 0)
    for _ in range(calls):
        r("EVAL", SILENCE, 2, K + "due", K + "dues", users, rng.randrange(1 << 30))
        r("SLOWLOG", "RESET")
        before = r.commandstats()
        removed = r("EVALSHA", CLEANUP, len(CLEAN_KEYS), *CLEAN_KEYS, 500, TIMEOUT, GRACE)[0]
        after = r.commandstats()
        assert removed == 500, f"a cleanup call removed {removed}, not 500"
        times.append(next(e[2] for e in r("SLOWLOG", "GET", 100)
                          if e[3][0].lower() == "evalsha") / 1000)
        for name in ("zrem", "hdel", "hmget"):
            inside[name] = inside.get(name, 0) + (after.get(name, 0) - before.get(name, 0))
    r("CONFIG", "SET", "slowlog-log-slower-than", 10000)
    return times, {name: usec / calls / 1000 for name, usec in inside.items()}


# Each round removes 10 calls of 500 from its fill; room is left for the
# random picks to find users still there.
assert users >= 20 * 500, "poll-profile.sh needs at least 10,000 users"
measures = {name: [] for name in ("cmd", "lua", "parse", "blind", "blind_cmd", "rank", "rank_base",
                                   "look", "look_base", "look_hmget", "look_plain", "bare",
                                   "numbers", "numbers_cpu")}
NOTHING = load("return 1")
# The parts of rank.lua's fixed cost, each a script of lib.lua with that
# part alone (the script's arguments and keys as rank.lua gets them).
PARTS = [
    ("a script call with no lib.lua", r("SCRIPT", "LOAD", "return 1")),
    ("lib.lua's helpers defined", NOTHING),
    ("+ Redis's time (TIME)", load("now_us() return 1")),
    ("+ the control HASH (read_control: HMGET of 17 fields)", load("read_control(KEYS[5]) return 1")),
    ("+ the wait estimate (HMGET of the gate)", load("wait_estimator(KEYS[4], 1, 1000, 200) return 1")),
    ("+ the heartbeats' helpers (heartbeats(): EXISTS and closures)",
     load("heartbeats(KEYS[2], KEYS[7], KEYS[8], KEYS[1], 1, 1000, 30000) return 1")),
    ("+ the place ranks are derived from (ZRANGE at a rank)",
     load("redis.call('ZRANGE', KEYS[1], 24000, 24000, 'WITHSCORES') return 1")),
    ("+ the counters (rank_counters: HMGET and ZCARD)", load("rank_counters(KEYS[4], KEYS[1]) return 1")),
    ("+ the departures since (none new: LLEN, LINDEX)",
     load("departures_since(KEYS[4], 0, 0, 1000, '') return 1")),
]
measures.update({label: [] for label, _ in PARTS})


def cpu_per_call(make, calls=CALLS):
    """Redis CPU (INFO cpu) of one call: with Redis alone, what it spent."""
    def cpu():
        info = r("INFO", "cpu")
        return sum(float(l.split(":")[1]) for l in info.splitlines()
                   if l.startswith(("used_cpu_user:", "used_cpu_sys:")))
    before = cpu()
    r.pipeline([make([]) for _ in range(calls)])
    return (cpu() - before) * 1e6 / calls


def per_call(make):
    """Redis time of one call, every command it ran included (a script's
    own commands are counted apart from its EVALSHA)."""
    r("CONFIG", "RESETSTAT")
    r.pipeline([make([]) for _ in range(CALLS)])
    return sum(v for k, v in r.commandstats().items()
               if k.split("|")[0] not in ("config", "info")) / CALLS
removals = []
for _ in range(rounds):
    fill()
    measures["cmd"].append(per_poll("hmget", lambda b: ["HMGET", K + "due"] + b))
    measures["lua"].append(per_poll("evalsha", lambda b: ["EVALSHA", HMGET_LUA, len(RANK_KEYS)] + RANK_KEYS
                                    + [0] * 8 + b))
    measures["parse"].append(per_poll("evalsha", lambda b: ["EVALSHA", PARSE_LUA, len(RANK_KEYS)] + RANK_KEYS
                                      + [0] * 8 + b))
    measures["blind"].append(per_poll("evalsha", lambda b: ["EVALSHA", BLIND_LUA, len(RANK_KEYS)] + RANK_KEYS
                                      + [0] * 8 + with_arrivals(b)))
    # The same writes as plain commands, as an instance sends them
    # (poll_many's write_far): the candidates, the values, and the
    # departure counters read after the write (the users' scores are read
    # only when those moved, which nothing here makes them do).
    r("CONFIG", "RESETSTAT")
    due = int(time.time() * 1000) + 30000
    r.pipeline([c for b in batches(7) for c in (
        ["RPUSH", K + f"dues:{due}"] + b,
        ["HSET", K + "due"] + [x for u, a in zip(b, with_arrivals(b)[1::2]) for x in (u, f"{due}:{a}")],
        ["HMGET", K + "admission", "epoch", "total", "removed", "added"])])
    stats = r.commandstats()
    measures["blind_cmd"].append(
        (stats.get("hset", 0) + stats.get("rpush", 0) + stats.get("hmget", 0)) / (BATCH * CALLS))
    if RANK_BASE:
        # The earlier script on a fill of its own, first in odd rounds.
        order = [("rank_base", RANK_BASE), ("rank", RANK)]
        for name, sha in (order if len(measures["rank"]) % 2 == 0 else order[::-1]):
            fill()
            measures[name].append(per_poll("evalsha", rank_args(sha)))
    fill()
    if not RANK_BASE:
        measures["rank"].append(per_poll("evalsha", rank_args(RANK)))
    # A batch's fixed cost: a script call that does nothing but define
    # lib.lua's helpers, and rank.lua asked for the batch's numbers alone
    # (no users, no departures asked for).
    measures["bare"].append(per_call(lambda b: ["EVALSHA", NOTHING, 0]))
    measures["numbers"].append(per_call(rank_args(RANK)))
    measures["numbers_cpu"].append(cpu_per_call(rank_args(RANK)))
    for label, sha in PARTS:
        measures[label].append(cpu_per_call(lambda b, sha=sha: ["EVALSHA", sha, len(RANK_KEYS)] + RANK_KEYS + [0] * 9))
    look, look_hmget = cleanup_look()
    measures["look"].append(look)
    measures["look_hmget"].append(look_hmget)
    measures["look_plain"].append(cleanup_look_plain())
    if RANK_BASE:
        measures["look_base"].append(cleanup_look(CLEANUP_BASE)[0])
    times, inside = cleanup_removals()
    removals.append((statistics.median(times), max(times), inside))

m = {k: statistics.median(v) for k, v in measures.items() if v}
print(f"\npoll profile: {users:,} waiting, batches of {BATCH}, median of {rounds} rounds "
      f"(min-max), Redis alone on the machine")
print("| Measure | Redis time | |")
print("|---|---|---|")
def row(label, key, unit, note=""):
    v = measures[key]
    print(f"| {label} | {m[key]:.2f} us {unit} ({min(v):.2f}-{max(v):.2f}) | {note} |")
row("HMGET of a batch's heartbeats, as a command", "cmd", "per user", "the hash lookups")
row("the same HMGET from a script that returns it", "lua", "per user",
    "+ the script call, the users and values through Lua")
row("+ each value parsed as due and arrival", "parse", "per user", "")
row("a heartbeat written blind (arrival known), from a script", "blind", "per user",
    "no read: HSET and RPUSH of the batch")
row("the same writes as plain commands", "blind_cmd", "per user", "RPUSH, HSET and the counters' HMGET")
row("rank.lua far back (half the heartbeats written)", "rank", "per poll", "the shipped script")
if RANK_BASE:
    row(f"rank.lua as at {baseline}, same fills", "rank_base", "per poll", "the earlier script")
row("a script call that does nothing (lib.lua's helpers defined)", "bare", "per call", "")
row("rank.lua with no users: a batch's numbers alone", "numbers", "per call",
    "what every rank call pays before its users, its commands included")
row("the same, by Redis CPU (INFO cpu)", "numbers_cpu", "per call",
    "the call's reading and parsing by Redis included")
for label, _ in PARTS:
    row(f"its parts, each alone after lib.lua (Redis CPU): {label}", label, "per call", "")
row("cleanup.lua's look at one candidate", "look", "per candidate", "")
if RANK_BASE:
    row(f"cleanup.lua's look as at {baseline}", "look_base", "per candidate", "the earlier script")
row("of which its HMGET", "look_hmget", "per candidate", "the hash lookup")
row("the same look as plain commands", "look_plain", "per candidate", "LPOP and HMGET")
# A poll far back with the decisions in the instance and plain commands
# only: the read of every poll, the write of half of them (as in the fill)
# and cleanup's later look at each write.
plain = m["cmd"] + 0.5 * m["blind_cmd"] + 0.5 * m["look_plain"]
print(f"| a poll far back as plain commands, with cleanup's share (half written) | {plain:.2f} us per poll | "
      f"HMGET + half a write + half a plain look; rank.lua with cleanup's share: "
      f"{m['rank'] + 0.5 * m['look']:.2f} |")
medians = [t[0] for t in removals]
inside = {k: statistics.median(t[2][k] for t in removals) for k in ("zrem", "hdel", "hmget")}
print(f"| cleanup.lua removing 500 silent users, one call | median {statistics.median(medians):.2f} ms "
      f"(round medians {min(medians):.2f}-{max(medians):.2f}), max {max(t[1] for t in removals):.2f} ms | "
      f"inside: ZREM {inside['zrem']:.2f} ms, HDEL {inside['hdel']:.2f}, HMGET {inside['hmget']:.2f}, "
      f"the rest Lua |")
EOF
