#!/usr/bin/env bash
# What one poll far back costs Redis per user, at a queue's size, for the
# heartbeat of today and for heartbeats kept as marks by arrival number:
# the figures the design for ten million is chosen by (docs/scale.md,
# "Choosing the design for ten million"). Run through
# `scripts/scale.sh primitives`:
#
#   scripts/scale.sh primitives              # 10,000,000 users
#   scripts/scale.sh primitives 1000000      # a million
#
# A quiet Redis of its own on a free port is filled with N waiting users
# as waitgate keeps them (the waiting set, scored by arrival; the `due`
# hash, `<due>:<arrival>` by userId) and, beside them, what the marks need
# (a hash of userId -> arrival number, and one byte a number). Then batches
# of random users, the size of the coalesced calls measured under churn
# (144 users), are read and written each way, and INFO commandstats says
# what Redis spent a user:
#
#   today: the heartbeat's lookup (HMGET of the batch), its write for half
#     of them (HSET, and RPUSH into the due bucket's list), cleanup's later
#     look at each written one (LRANGE of the list, HMGET), and the
#     recheck of written users' scores when someone left meanwhile
#     (ZMSCORE; under churn about one batch in three);
#   marks: the number's lookup (HMGET of userId -> number), the marks read
#     (one BITFIELD GET u8 a user) and written for half of them (one
#     BITFIELD SET), cleanup's scan of the marks (GETRANGE of 8 KiB
#     ranges over all N, once a cleanup interval of 10 s, shared out over
#     the polls of 10 s at the advised cadence of 30 s), and the same
#     marks for a poll that brings its number (no lookup).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-tools.sh
ensure_packages redis-server python3

users=${1:-10000000}
batch=${PRIMITIVES_BATCH:-144}
rounds=${PRIMITIVES_ROUNDS:-2000}

work=$(mktemp -d)
port=$(free_port)
redis-server --port "$port" --save '' --appendonly no --dir "$work" \
  --daemonize yes --pidfile "$work/redis.pid" --logfile "$work/redis.log"
trap 'kill "$(cat "$work/redis.pid")" 2>/dev/null || true; rm -rf "$work"' EXIT
wait_port "$port"

python3 - "$port" "$users" "$batch" "$rounds" <<'EOF'
import random, sys, time
sys.path.insert(0, "scripts")
from resp import Redis

port, users, batch, rounds = (int(x) for x in sys.argv[1:5])
r = Redis(port)
W, DUE, DUES, NUM, MARKS = "q:{q}:waiting", "q:{q}:due", "q:{q}:dues", "q:{q}:num", "q:{q}:marks"
BASE = 1_790_000_000_000_000  # an arrival, microseconds

FILL = """
local from, to, base = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
for i = from, to do
  local user = 'user-' .. i
  local arrival = tostring(base + i)
  redis.call('ZADD', KEYS[1], arrival, user)
  redis.call('HSET', KEYS[2], user, '1790000030000:' .. arrival)
  redis.call('HSET', KEYS[3], user, i)
end
redis.call('SETRANGE', KEYS[4], from, string.rep('\\1', to - from + 1))
return 1
"""
started = time.time()
step = 100_000
for first in range(0, users, step):
    last = min(users, first + step) - 1
    r("EVAL", FILL, 4, W, DUE, NUM, MARKS, first, last, BASE)
memory = r("INFO", "memory")
used = next(l for l in memory.split("\r\n") if l.startswith("used_memory:")).split(":")[1]
print(f"Filled {users:,} users in {time.time() - started:.0f} s; Redis holds {int(used) / 2**30:.2f} GiB")


def spent(run):
    """Redis usec by command while `run` ran (not the measuring's own)."""
    r("CONFIG", "RESETSTAT")
    run()
    return {k: v for k, v in r.commandstats().items() if not k.startswith(("config", "info"))}


rng = random.Random(7)
picks = [[rng.randrange(users) for _ in range(batch)] for _ in range(rounds)]
polls = batch * rounds


def today():
    for i, pick in enumerate(picks):
        names = [f"user-{u}" for u in pick]
        r("HMGET", DUE, *names)
        written = names[: batch // 2]
        hset = ["HSET", DUE]
        for name in written:
            hset += [name, f"1790000060000:{BASE + int(name[5:])}"]
        r(*hset)
        bucket = f"{DUES}:{i % 64}"
        r("RPUSH", bucket, *written)
        if i % 3 == 0:
            r("ZMSCORE", W, *written)
    # Cleanup's later look at each written heartbeat: the bucket's list,
    # then the heartbeats it names, 500 at a time.
    for b in range(64):
        bucket = f"{DUES}:{b}"
        n = r("LLEN", bucket)
        for at in range(0, n, 500):
            names = r("LRANGE", bucket, at, at + 499)
            r("HMGET", DUE, *names)


def marks(lookup):
    def run():
        for pick in picks:
            if lookup:
                r("HMGET", NUM, *[f"user-{u}" for u in pick])
            get = ["BITFIELD", MARKS]
            for u in pick:
                get += ["GET", "u8", f"#{u}"]
            r(*get)
            put = ["BITFIELD", MARKS]
            for u in pick[: batch // 2]:
                put += ["SET", "u8", f"#{u}", 2]
            r(*put)
    return run


def scan():
    """Cleanup's pass over every mark, 8 KiB at a time."""
    for at in range(0, users, 8192):
        r("GETRANGE", MARKS, at, min(users, at + 8192) - 1)


rows = []
a = spent(today)
rows.append(("today: heartbeat lookup, write for half, cleanup's look, recheck", a))
b = spent(marks(True))
c = spent(marks(False))
d = spent(scan)
# One cleanup pass every 10 s over the polls of 10 s at 30 s cadence:
# users / 3 polls share it.
scan_share = sum(d.values()) / (users / 3)

print()
print(f"Redis time a poll far back, per user, at {users:,} waiting (INFO commandstats;"
      f" {rounds:,} batches of {batch}, {polls:,} polls each way):")
print()
print("| design | µs a poll | by command (µs a poll) |")
print("|---|---|---|")
def row(label, used, extra=0.0):
    total = sum(used.values()) / polls + extra
    parts = ", ".join(f"{k} {v / polls:.3f}" for k, v in sorted(used.items(), key=lambda kv: -kv[1]))
    if extra:
        parts += f", cleanup's scan {extra:.3f}"
    print(f"| {label} | {total:.3f} | {parts} |")
    return total
t = row("today: lookup, write for half, cleanup's look, recheck (1 in 3)", a)
m = row("marks: number lookup, mark read, write for half, cleanup's scan", b, scan_share)
n = row("marks, the number brought by the poll", c, scan_share)
print()
print(f"One cleanup scan of all {users:,} marks: {sum(d.values()) / 1000:.1f} ms of Redis"
      f" ({users // 8192 + 1:,} GETRANGEs)")
print()
cadence = users / 30
for label, us in (("today", t), ("marks", m), ("marks, number brought", n)):
    print(f"At {users:,} polling every 30 s ({cadence:,.0f} polls a second): {label}: "
          f"{us * cadence / 1e6:.2f} of a Redis core for the per-user work")
EOF
