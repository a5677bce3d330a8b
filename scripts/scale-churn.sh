#!/usr/bin/env bash
# A queue in motion: N waitgate instances sharing the pollers of a queue of
# 1,000,000 while admission runs from the head, users drop out at random
# places and silent users are removed by cleanup. Run through
# `scripts/scale.sh churn`; it prints, from one run:
#
#   - Redis time per poll: the usec of every command in INFO commandstats
#     during the polls, less the same churn without polls (measured just
#     before), per poll; Redis CPU (INFO cpu) likewise; and the commands a
#     poll costs (script calls and the plain commands of polls far back),
#     and the commands that took the most of it;
#   - how the polls were answered (waitgate_rank_polls_total, summed over
#     the instances) and, against the age of the samples each instance
#     held, the share answered by a walk of the waiting set;
#   - the sizes of the coalesced rank calls (waitgate_redis_batch_users);
#   - each instance's background Redis time (samples, gauges, an admission
#     tick, a cleanup pass) with neither polls nor churn;
#   - ranks checked against ZRANK during the churn.
#
#   scripts/scale.sh churn                    # 1,000,000 users, 30 s of polls
#   scripts/scale.sh churn 200000 10          # fewer users, shorter
#   CHURN_INSTANCES=3 CHURN_ADMIT=200 CHURN_DROPOUTS=100 CHURN_SILENT=50 \
#     CHURN_CONNECTIONS=1024 scripts/scale.sh churn
#   CHURN_BINARY=/path/to/waitgate scripts/scale.sh churn   # another build
#   CHURN_COMPARE=/path/to/waitgate scripts/scale.sh churn  # this build, then that one
#   CHURN_SLOWLOG=1 scripts/scale.sh churn  # also the polls' Redis time by script (dearer)
#   CHURN_PACE_MS=0 scripts/scale.sh churn  # the rank calls unpaced (redis.poll-pace-ms)
#   CHURN_RATE=20000 scripts/scale.sh churn  # 20,000 polls a second, sent on time
#   CHURN_PERF=1 scripts/scale.sh churn     # also where Redis's CPU went during the
#                                           # polls (perf record of redis-server)
#   CHURN_CREDENTIALS=0 scripts/scale.sh churn  # polls without the queueCredential (by
#                                           # default each poll sends the user's, as the
#                                           # page and the JS client do: far back its
#                                           # heartbeat is then a mark at its number)
#   CHURN_CREDENTIALS=compare scripts/scale.sh churn  # with them, then without, in one run
#   CHURN_FORGET=0 scripts/scale.sh churn   # the pollers poll every user, those who left
#                                           # too. By default, as a crowd does: one user in
#                                           # 16 is a leaver, the dropouts and silent users
#                                           # are drawn from them, and the pollers never poll
#                                           # a leaver (a user who dropped out or went
#                                           # silent sends no polls); and a user answered
#                                           # 404 or ACTIVE is not polled again, as the page
#                                           # and the JS client stop following a place
#
# The churn: admission of CHURN_ADMIT a second from the head with no cap
# (the queue's own admission: interval 1 s, batch CHURN_ADMIT); dropouts of
# CHURN_DROPOUTS a second at random places (dropout.lua, as an instance
# calls it once the credential is checked); CHURN_SILENT users a second
# gone silent (their heartbeat made stale, as a user who stops polling
# leaves it) and removed by the instances' cleanup. The pollers poll
# random users of the 1,000,000, as scripts/scale.sh does, but for the
# leavers the dropouts and silent users are drawn from (one in 16, see
# CHURN_FORGET above).
set -euo pipefail
cd "$(dirname "$0")/.."
# CHURN_COMPARE: a reference build, measured the same way right after this
# one, in one command.
if [ -n "${CHURN_COMPARE:-}" ]; then
  echo "# This build"
  CHURN_COMPARE='' "$0" "$@"
  echo
  echo "# The reference: $CHURN_COMPARE"
  # (Taken first: assignments before a command see the earlier ones.)
  reference=$CHURN_COMPARE
  CHURN_COMPARE='' CHURN_BINARY="$reference" "$0" "$@"
  exit
fi
# CHURN_CREDENTIALS=compare: polls with the users' credentials, then the
# same without them, in one command.
if [ "${CHURN_CREDENTIALS:-}" = compare ]; then
  echo "# Polls that send the queueCredential"
  CHURN_CREDENTIALS=1 "$0" "$@"
  echo
  echo "# The reference: the same polls without it"
  CHURN_CREDENTIALS=0 "$0" "$@"
  exit
fi
. scripts/ensure-tools.sh
ensure_rust
ensure_packages redis-server python3 curl

users=${1:-1000000}
seconds=${2:-30}
instances=${CHURN_INSTANCES:-3}
admit=${CHURN_ADMIT:-200}
dropouts=${CHURN_DROPOUTS:-100}
silent=${CHURN_SILENT:-50}
conns=${CHURN_CONNECTIONS:-1024}
# CHURN_PACE_MS: the instances' redis.poll-pace-ms (unset: their default).
pace=${CHURN_PACE_MS:-}
# CHURN_RATE: polls a second in all, sent on time (an open loop, as a crowd
# polls); unset: each connection polls again as soon as it is answered.
rate=${CHURN_RATE:-}
# CHURN_CREDENTIALS=0: polls without the users' credentials.
with_credentials=${CHURN_CREDENTIALS:-1}
forget=${CHURN_FORGET:-1}
leavers=16
[ "$forget" = 1 ] || leavers=0
if [ -n "$rate" ] && ! { [[ "$rate" =~ ^[0-9]+$ ]] && [ "$rate" -ge "$instances" ]; }; then
  echo "CHURN_RATE: a whole number of polls a second, at least one per instance" >&2
  exit 1
fi

echo "Building release binaries ..." >&2
cargo build --release --locked --bin waitgate --example pollers >&2
# CHURN_BINARY: another build of waitgate to measure (an earlier commit's).
binary=${CHURN_BINARY:-$RELEASE/waitgate}

work_and_children
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
P_REDIS=$(free_port)
R() { redis-cli -p "$P_REDIS" "$@"; }
K='queue:{big}'

redis-server --port "$P_REDIS" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
  --logfile "$work/redis.log" &
pids+=($!)
redis_pid=$!
if [ -n "${CHURN_PERF:-}" ]; then
  command -v perf >/dev/null || { echo "CHURN_PERF needs perf (apt-get install linux-perf)" >&2; exit 1; }
fi
# CHURN_PERF: records redis-server as `$work/NAME.data` through a phase, its
# start left out. Sampled at 999 Hz, no call graphs: the packaged
# redis-server has no frame pointers.
perf_pids=()
profile_redis() { # NAME
  [ -n "${CHURN_PERF:-}" ] || return 0
  perf record -F 999 -p "$redis_pid" -o "$work/$1.data" -- sleep "$((seconds - 2))" \
    >"$work/$1.log" 2>&1 &
  perf_pids+=($!)
}
wait_port "$P_REDIS"

export JWT_SECRET
JWT_SECRET=$(head -c 32 /dev/urandom | base64)
ports=() admins=() wg_pids=()
for i in $(seq "$instances"); do
  port=$(free_port) admin=$(free_port)
  ports+=("$port") admins+=("$admin")
  # Cleanup every second; heartbeats last an hour, so that only the
  # silent users the churn makes are removed (the pollers pick users at
  # random, not at each one's advised cadence).
  cat > "$work/waitgate-$i.yaml" <<EOF
listen: 127.0.0.1:$port
admin-listen: 127.0.0.1:$admin
threads: 2
max-connections: 20000
redis: {url: 'redis://127.0.0.1:$P_REDIS/0', command-timeout-ms: 2000${pace:+, poll-pace-ms: $pace}}
queues:
  big:
    heartbeat: {timeout-ms: 3600000, cleanup-interval-ms: 1000, cleanup-batch-size: 500}
    admission: {interval-ms: 1000, batch-size: $admit}
upstreams: {}
routes: []
log: {filter: warn, access: false}
EOF
done
# The gate is held while the queue fills.
R HSET "$K:admission" window 999999999999 window_ms 1000 >/dev/null
for i in $(seq "$instances"); do
  RUST_LOG=warn "$binary" -c "$work/waitgate-$i.yaml" 2>"$work/waitgate-$i.log" &
  pids+=($!) wg_pids+=($!)
done
for i in $(seq "$instances"); do wait_port "${ports[$((i - 1))]}" "$work/waitgate-$i.log"; done

echo "Registering $users users through the API ..." >&2
fill=$("$RELEASE"/examples/pollers register --target "127.0.0.1:${ports[0]}" --users "$users" --connections 256 \
  --credentials "$work/credentials")
# What the pollers send: each user's credential, or none.
credentials=()
[ "$with_credentials" = 0 ] || credentials=(--credentials "$work/credentials")
echo "  $fill" >&2
waiting=$(R ZCARD "$K:waiting")
[ "$waiting" = "$users" ] || { echo "expected $users waiting, found $waiting" >&2; exit 1; }
# Each user polled once (a registration's first poll), as in a queue that
# has been polling a while.
"$RELEASE"/examples/pollers sweep --target "127.0.0.1:${ports[0]}" --users "$users" --connections 256 \
  "${credentials[@]}" >/dev/null

info() { R INFO "$1" | tr -d '\r'; }
# All commands' usec and calls, the scripts' and the plain poll commands'
# calls, and Redis CPU (us), now.
snapshot() {
  python3 - "$(info commandstats)" "$(info cpu)" <<'EOF'
import sys
usec = calls = scripts = plain = 0
for line in sys.argv[1].splitlines():
    if not line.startswith("cmdstat_"):
        continue
    name = line[8:line.index(":")]
    fields = dict(kv.split("=") for kv in line.split(":", 1)[1].split(","))
    usec += int(fields["usec"]); calls += int(fields["calls"])
    if name in ("evalsha", "eval", "evalsha_ro", "eval_ro"):
        scripts += int(fields["calls"])
    elif name in ("hmget", "hset", "rpush", "zadd", "zmscore", "bitfield", "bitfield_ro"):
        plain += int(fields["calls"])
cpu = sum(float(l.split(":")[1]) for l in sys.argv[2].splitlines()
          if l.startswith(("used_cpu_sys:", "used_cpu_user:")))
print(usec, calls, scripts, plain, int(cpu * 1e6))
EOF
}
# waitgate's metrics, summed over the instances, as JSON.
scrape() {
  for admin in "${admins[@]}"; do curl -s "127.0.0.1:$admin/metrics"; done |
    python3 -c '
import json, os, re, sys
total = {}
for line in sys.stdin:
    m = re.match(r"(waitgate_(?:rank_polls_total|rank_poll_sample_age_seconds_bucket|redis_batch_users_bucket|redis_batch_users_count|redis_batch_users_sum|queue_waiting|cleanup_removed_total|admitted_total))(\{[^}]*\})? (\S+)", line)
    if m:
        key = m.group(1) + (m.group(2) or "")
        total[key] = total.get(key, 0.0) + float(m.group(3))
print(json.dumps(total))'
}

# The churn: dropouts and silent users from one driver, at their rates
# (admission is the instances' own).
cat lua/lib.lua lua/dropout.lua > "$work/dropout.lua"
DROPOUT=$(R SCRIPT LOAD "$(cat "$work/dropout.lua")")
cat > "$work/churn.py" <<'PY'
import random, sys, time
port, K, sha, dropouts, silent, seconds = sys.argv[1], sys.argv[2], sys.argv[3], \
    int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
users, leavers = int(sys.argv[7]), int(sys.argv[8])
sys.path.insert(0, "scripts")
from resp import Redis
call = Redis(port)
# dropout.lua's KEYS, in its header's order.
keys = [K + ":" + k for k in ("waiting", "heartbeat", "credential", "active", "prequeue",
                              "admission", "due", "spent", "control", "numbering", "marks",
                              "arrivals")]
random.seed(11)
def someone():
    """A waiting user: a leaver (one numbered K-1 mod K, whom the pollers
    never poll) with leavers K, else anyone."""
    if not leavers:
        return call("ZRANDMEMBER", keys[0])
    for _ in range(64):
        user = f"u{random.randrange(users // leavers) * leavers + leavers - 1}"
        if call("ZSCORE", keys[0], user):
            return user
    return None
start = time.monotonic()
done_dropouts = done_silent = 0
while time.monotonic() - start < seconds:
    elapsed = time.monotonic() - start
    while done_dropouts < dropouts * elapsed:
        user = someone()
        arrival = user and call("ZSCORE", keys[0], user)
        if arrival:
            call("EVALSHA", sha, len(keys), *keys, user, int(float(arrival)))
        done_dropouts += 1
    while done_silent < silent * elapsed:
        # As a user who stops polling leaves it: a heartbeat long past, in
        # a bucket cleanup looks at.
        # A numbered user's heartbeat is its mark too: a day past, and the
        # number kept in the `due` entry, so that cleanup checks the mark.
        user = someone()
        if user:
            value = call("HGET", K + ":due", user) or ""
            rest = value.split(":", 1)[1] if ":" in value else ""
            call("HSET", K + ":due", user, "1" + (":" + rest if rest else ""))
            number = rest.split(":")[1] if rest.count(":") == 1 else None
            base = call("HGET", K + ":numbering", "base")
            if number and base and int(number) >= int(base):
                secs, micros = call("TIME")
                day_ago = (int(secs) * 1000 + int(micros) // 1000 - 86400000) % 2**32
                # The mark is the first half of the number's eight bytes.
                call("BITFIELD", K + ":marks", "SET", "u32",
                     (int(number) - int(base)) * 64, day_ago or 1)
            call("RPUSH", K + ":dues:1000", user)
            call("ZADD", K + ":dues", 1000, 1000)
        done_silent += 1
    time.sleep(0.005)
print(f"dropouts={done_dropouts} silent={done_silent}")
PY
churn() { python3 "$work/churn.py" "$P_REDIS" "$K" "$DROPOUT" "$dropouts" "$silent" "$1" "$users" "$leavers"; }

# The sweep's heartbeats are cleanup's candidates once their bucket is a
# timeout past: the background is measured once cleanup has looked at
# every bucket that is. (With the hour's timeout none is, so nothing is
# waited for. An earlier version waited for every bucket to go, which with
# that timeout never happens, and so slept 300 s in every run.)
echo "Waiting for cleanup to look at the sweep's heartbeats ..." >&2
for _ in $(seq 300); do
  now_ms=$(( $(R TIME | head -1) * 1000 ))
  [ "$(R ZCOUNT "$K:dues" -inf $((now_ms - 3600000)))" = 0 ] && break
  sleep 1
done
echo "Background Redis time of $instances instances, no polls, no churn (10 s) ..." >&2
# Admission stays held: an admission tick finds nobody to admit.
R CONFIG RESETSTAT >/dev/null
quiet_before=$(snapshot); sleep 10; quiet_after=$(snapshot)
# Where it went: the commands by their usec in those 10 s.
info commandstats | awk -F'[:,=]' '/^cmdstat_/ { printf "%s %s %s\n", $5, substr($1, 9), $3 }' |
  sort -rn | head -6 > "$work/quiet-commands"

# Admission from the head at its rate, with no cap.
R HDEL "$K:admission" window window_ms >/dev/null
echo "Churn without polls ($seconds s): admission $admit/s, dropouts $dropouts/s, silent $silent/s ..." >&2
churn_before=$(snapshot)
profile_redis perf-churn
churn_out=$(churn "$seconds")
churn_after=$(snapshot)
echo "  $churn_out" >&2

echo "Churn with $conns pollers over $instances instances${rate:+, $rate polls/s in all} ($seconds s) ..." >&2
metrics_before=$(scrape)
if [ -n "${CHURN_SLOWLOG:-}" ]; then
  # Every command into the slow log (the newest million): which script took
  # the polls' EVALSHA time. It costs Redis a little on every command, so
  # the figures of such a run are not comparable with the others'.
  R CONFIG SET slowlog-log-slower-than 0 >/dev/null
  R CONFIG SET slowlog-max-len 1000000 >/dev/null
  R SLOWLOG RESET >/dev/null
fi
R CONFIG RESETSTAT >/dev/null
polls_before=$(snapshot)
per=$(( (conns + instances - 1) / instances ))
churn "$seconds" > "$work/churn-during" &
churn_pid=$!
poll_pids=()
for i in $(seq "$instances"); do
  "$RELEASE"/examples/pollers poll --target "127.0.0.1:${ports[$((i - 1))]}" --users "$users" \
    --connections "$per" --seconds "$seconds" ${rate:+--rate "$((rate / instances))"} \
    "${credentials[@]}" --forget "$forget" --leavers "$leavers" > "$work/pollers-$i" &
  poll_pids+=($!)
done
profile_redis perf
# Ranks against ZRANK while it all moves: 1,000 random users.
accuracy=$(python3 - "$users" "${ports[0]}" "$P_REDIS" <<'EOF'
import http.client, json, random, socket, sys, time
users, port, rport = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
time.sleep(2)
api = http.client.HTTPConnection("127.0.0.1", port)
sys.path.insert(0, "scripts")
from resp import Redis
r = Redis(rport)
def zrank(user):
    return r("ZRANK", "queue:{big}:waiting", user)
random.seed(7)
worst, n, outside = 0.0, 0, 0
for user in [f"u{random.randrange(users)}" for _ in range(1000)]:
    before = zrank(user)
    api.request("GET", f"/api/v1/queue/rank?userId={user}")
    reply = api.getresponse()
    body = reply.read()
    after = zrank(user)
    if reply.status != 200 or before is None or after is None:
        continue
    rank = json.loads(body).get("rank")
    if rank is None:
        continue
    n += 1
    low, high = min(before, after), max(before, after)
    off = 0 if low <= rank <= high else min(abs(rank - low), abs(rank - high))
    if high >= 1000:
        worst = max(worst, off / high)
    elif off:
        outside += 1
print(f"checked={n} exact_near_head_missed={outside} worst_far_back={worst * 100:.4f}%")
EOF
)
for pid in "${poll_pids[@]}"; do wait "$pid"; done
wait "$churn_pid"
polls_after=$(snapshot)
metrics_after=$(scrape)
# Where the polls' Redis time went: the commands by their usec (the churn's
# own among them).
info commandstats | awk -F'[:,=]' '/^cmdstat_/ { printf "%s %s %s\n", $5, substr($1, 9), $3 }' |
  sort -rn | head -8 > "$work/poll-commands"
echo "  $(cat "$work/churn-during")" >&2
echo "  ranks: $accuracy" >&2
if [ -n "${CHURN_SLOWLOG:-}" ]; then
  R CONFIG SET slowlog-log-slower-than 10000 >/dev/null
  python3 - "$P_REDIS" > "$work/by-script" <<'EOF' || echo "(the slow log could not be read)" > "$work/by-script"
import hashlib, os, sys
sys.path.insert(0, "scripts")
from resp import Redis
r = Redis(sys.argv[1])
# Each script as waitgate loads it (src/store/scripts.rs): flags, lib.lua, the file.
lib = open("lua/lib.lua").read()
names = {}
for f in os.listdir("lua"):
    if f.endswith(".lua") and f != "lib.lua":
        for flags in ("", "#!lua flags=no-writes\n"):
            text = flags + lib + open("lua/" + f).read()
            names[hashlib.sha1(text.encode()).hexdigest()] = f
entries = r("SLOWLOG", "GET", -1)
spent, calls = {}, {}
for e in entries:
    args = e[3]
    name = args[0].lower()
    if name == "evalsha" and len(args) > 1:
        name = names.get(args[1], "script " + args[1][:8])
    spent[name] = spent.get(name, 0) + e[2]
    calls[name] = calls.get(name, 0) + 1
seconds = max(e[1] for e in entries) - min(e[1] for e in entries)
print(f"Redis time by command and script, the last {len(entries):,} commands of the polls"
      f" ({seconds} s; SLOWLOG with every command logged, so dearer than above):")
print()
print("| command or script | calls | usec | usec a call |")
print("|---|---|---|---|")
for name in sorted(spent, key=lambda n: -spent[n])[:12]:
    print(f"| {name} | {calls[name]:,} | {spent[name]:,} | {spent[name] / calls[name]:.1f} |")
EOF
  R SLOWLOG RESET >/dev/null
fi

CHURN_WORK=$work python3 - "$quiet_before" "$quiet_after" "$churn_before" "$churn_after" "$polls_before" "$polls_after" \
  "$metrics_before" "$metrics_after" "$instances" "$users" "$seconds" "$admit" "$dropouts" "$silent" \
  "$accuracy" "$work/quiet-commands" "$work/poll-commands" "$work"/pollers-* <<'EOF'
import json, os, re, sys
a = sys.argv
q0, q1, c0, c1, p0, p1 = ([int(x) for x in s.split()] for s in a[1:7])
m0, m1 = json.loads(a[7]), json.loads(a[8])
instances, users, seconds = int(a[9]), int(a[10]), float(a[11])
admit, dropouts, silent, accuracy = a[12], a[13], a[14], a[15]
quiet_commands = open(a[16]).read().split("\n")
poll_commands = open(a[17]).read().split("\n")
polls = errors = 0
p50 = p99 = 0.0
late = forgotten = 0
for path in a[18:]:
    out = open(path).read()
    polls += int(re.search(r"requests=(\d+)", out).group(1))
    errors += int(re.search(r"errors=(\d+)", out).group(1))
    p50 = max(p50, float(re.search(r"p50_ms=([\d.]+)", out).group(1)))
    p99 = max(p99, float(re.search(r"p99_ms=([\d.]+)", out).group(1)))
    late += int(re.search(r"late=(\d+)", out).group(1))
    forgotten += int(re.search(r"forgotten=(\d+)", out).group(1))
answered = polls + errors
d = lambda x0, x1, i: x1[i] - x0[i]
quiet_s = 10.0
churn_s = seconds
print(f"## Churn at {users:,} waiting: {instances} instances, admission {admit}/s, "
      f"dropouts {dropouts}/s, silent {silent}/s")
print()
print(f"Polls: {answered:,} in {seconds:.0f} s ({answered / seconds:,.0f}/s; "
      f"{errors:,} not 200: users admitted or gone; "
      f"{forgotten:,} users not polled again once told they left, as the page stops, "
      f"CHURN_FORGET=0 to poll them still); a poll's answer took "
      f"{p50:.1f} ms at the median and {p99:.1f} ms at the 99th percentile "
      f"(the slowest instance's{'; from when each was due, ' + format(late, ',') + ' sent over 1 ms late' if os.environ.get('CHURN_RATE') else ''})")
print()
print("| | per poll |")
print("|---|---|")
usec_polls, usec_churn = d(p0, p1, 0), d(c0, c1, 0) * seconds / churn_s
cpu_polls, cpu_churn = d(p0, p1, 4), d(c0, c1, 4) * seconds / churn_s
print(f"| Redis usec (commandstats), churn's own taken out | {(usec_polls - usec_churn) / answered:.2f} µs |")
print(f"| Redis usec (commandstats), all | {usec_polls / answered:.2f} µs |")
print(f"| Redis CPU (INFO cpu), churn's own taken out | {(cpu_polls - cpu_churn) / answered:.2f} µs |")
with open(os.path.join(os.environ["CHURN_WORK"], "figures.json"), "w") as f:
    json.dump({"polls": answered, "cpu_polls": cpu_polls, "cpu_churn": cpu_churn}, f)
print(f"| script calls | {(d(p0, p1, 2) - d(c0, c1, 2)) / answered:.3f} |")
print(f"| plain commands of polls far back | {(d(p0, p1, 3) - d(c0, c1, 3)) / answered:.3f} |")
print()
# What the churn itself cost Redis without polls: admission, the dropouts,
# cleanup's removals, and the samples taken again as users leave.
print("Where the Redis time of the polls went (commandstats, the churn's own included), by command:")
print()
print("| command | usec a poll | calls a poll | usec a call |")
print("|---|---|---|---|")
for line in poll_commands:
    if line.strip():
        usec, name, calls = line.split()
        print(f"| {name} | {int(usec) / answered:.2f} | {int(calls) / answered:.3f} | "
              f"{int(usec) / max(int(calls), 1):.2f} |")
print()
print(f"The churn alone, no polls: {d(c0, c1, 0) / churn_s:,.0f} usec/s of Redis (commandstats), "
      f"Redis CPU {d(c0, c1, 4) / churn_s / 1e4:.2f}% of a core")
print()
def delta(key):
    return m1.get(key, 0.0) - m0.get(key, 0.0)
paths = ["instance", "marked", "derived", "near", "walked", "again", "other"]
by_path = {p: delta(f'waitgate_rank_polls_total{{path="{p}",queue="big"}}') for p in paths}
total = sum(by_path.values()) or 1
print("How the polls were answered (all instances):")
print()
print("| path | polls | share |")
print("|---|---|---|")
for p in paths:
    print(f"| {p} | {by_path[p]:,.0f} | {100 * by_path[p] / total:.1f}% |")
print()
print("Against the age of the samples each instance held: the share walked far back")
print("(walked and again) among the polls far back (instance, marked, derived, walked, again):")
print()
print("| samples at most | polls far back | walked or asked again |")
print("|---|---|---|")
edges = ["0.5", "1", "2", "3", "5", "10", "30", "+Inf"]
prev = {p: 0.0 for p in paths}
for le in edges:
    now = {p: delta(f'waitgate_rank_poll_sample_age_seconds_bucket{{path="{p}",queue="big",le="{le}"}}') for p in paths}
    far = sum(now[p] - prev[p] for p in ("instance", "marked", "derived", "walked", "again"))
    slow = sum(now[p] - prev[p] for p in ("walked", "again"))
    if far:
        print(f"| {le} s | {far:,.0f} | {100 * slow / far:.1f}% |")
    prev = now
print()
print("Users in each coalesced rank call (all instances):")
print()
print("| at most | calls |")
print("|---|---|")
prev = 0.0
for le in ["1", "2", "4", "8", "16", "32", "64", "128", "256", "500", "+Inf"]:
    now = delta(f'waitgate_redis_batch_users_bucket{{call="rank",le="{le}"}}')
    if now - prev:
        print(f"| {le} | {now - prev:,.0f} |")
    prev = now
calls = delta('waitgate_redis_batch_users_count{call="rank"}')
batched = delta('waitgate_redis_batch_users_sum{call="rank"}')
if calls:
    print(f"\nmean {batched / calls:.1f} users a call")
print()
bg_usec = d(q0, q1, 0) / quiet_s / instances
bg_cpu = d(q0, q1, 4) / quiet_s / instances
print(f"Background Redis time per instance, no polls, no churn, cleanup idle: {bg_usec:,.0f} usec/s "
      f"({bg_usec / 1e4:.2f}% of a core; Redis CPU {bg_cpu / 1e4:.2f}%); by command, all "
      f"instances, in 10 s:")
print()
print("| command | usec | calls |")
print("|---|---|---|")
for line in quiet_commands:
    if line.strip():
        usec, name, calls = line.split()
        print(f"| {name} | {int(usec):,} | {int(calls):,} |")
print()
print(f"Ranks against ZRANK during the churn: {accuracy}")
EOF
if [ -f "$work/by-script" ]; then
  echo
  cat "$work/by-script"
fi
if [ -n "${CHURN_PERF:-}" ]; then
  for pid in "${perf_pids[@]}"; do wait "$pid" || true; done
  echo
  echo "Where redis-server's CPU went (perf record at 999 Hz, self time by symbol), during the"
  echo "polls and during the churn alone; a poll's share is the first less the second, over the polls:"
  echo
  for phase in perf perf-churn; do
    perf report -i "$work/$phase.data" --no-children --sort dso,symbol --stdio 2>/dev/null |
      grep -E '^ +[0-9.]+%' > "$work/$phase-symbols" || true
  done
  python3 - "$work/perf-symbols" "$work/perf-churn-symbols" "$work/figures.json" <<'PY'
import json, re, sys
def table(path):
    rows = []
    for line in open(path):
        m = re.match(r"\s+([0-9.]+)%\s+(\S+)\s+\[(.)\]\s+(\S+)", line)
        if m:
            rows.append((float(m.group(1)), m.group(2), m.group(3), m.group(4)))
    return rows
rows, churn_rows = table(sys.argv[1]), table(sys.argv[2])
# The polls and Redis's CPU (us) in each phase, as the report above counted them.
figures = json.load(open(sys.argv[3]))
cpu_polls, cpu_churn, polls = figures["cpu_polls"], figures["cpu_churn"], figures["polls"]
def kind(dso, level, sym):
    if level == "k" or dso.startswith("[kernel"):
        return "the kernel (scheduling, network, syscalls)"
    if re.match(r"(lua|luaV|luaH|luaS|luaD|luaC|luaF|luaO|luaK|luaM|luaL|luaX|luaY|luaT|luaG|luaZ|luaU|luaE|luaI|luaB|str_|math_|tab_|auxL)", sym) or sym.startswith(("luaRedis", "luaReply", "redisProtocolToLua", "luaCallFunction", "evalGenericCommand", "scriptCall")):
        return "Lua: the interpreter and redis.call"
    if sym in ("dictFind", "dictSdsKeyCompare", "dictSdsHash", "dictGenHashFunction", "siphash", "dictFetchValue", "lookupKey", "dictEncObjKeyCompare", "dictEncObjHash", "hashTypeGetValue", "hashTypeGetFromHashTable"):
        return "hash-table lookups (keys, hash fields, the command table)"
    if re.match(r"(je_|malloc|free|zmalloc|zfree|zcalloc|zrealloc|_int_|__libc_)", sym) or sym in ("malloc_usable_size", "cfree"):
        return "memory allocation"
    if sym.startswith("0x"):
        return "unnamed (static functions of redis-server: Lua's among them)"
    if dso.startswith("libc") or dso.startswith("ld-"):
        return "libc (copies, strings)"
    return "the rest of redis-server (commands, networking, replies)"
def by_kind(rows):
    total = {}
    for share, dso, level, sym in rows:
        k = kind(dso, level, sym)
        total[k] = total.get(k, 0) + share
    return total
total, churn_total = by_kind(rows), by_kind(churn_rows)
print("| | polls and churn | churn alone | a poll's share |")
print("|---|---|---|---|")
for k in sorted(total, key=lambda k: -total[k]):
    mine = (total[k] * cpu_polls - churn_total.get(k, 0) * cpu_churn) / 100 / polls
    print(f"| {k} | {total[k]:.1f}% | {churn_total.get(k, 0):.1f}% | {mine:.2f} µs |")
print(f"| Redis CPU (INFO cpu) | {cpu_polls / 1e6:.2f} s | {cpu_churn / 1e6:.2f} s | "
      f"{(cpu_polls - cpu_churn) / polls:.2f} µs |")
print()
print("During the polls, the symbols:")
print()
print("| self | where | symbol |")
print("|---|---|---|")
for share, dso, level, sym in rows[:25]:
    print(f"| {share:.2f}% | {dso} | {sym} |")
PY
fi
