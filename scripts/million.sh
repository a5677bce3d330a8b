#!/usr/bin/env bash
# The 1,000,000-waiting-users run (not part of CI; about two minutes):
#   - Redis memory per waiting user, from INFO memory before and after
#     registering N users through waitgate's real register API;
#   - Redis time of one admission (lua/admit.lua, batch 100) and of one
#     cleanup batch (lua/cleanup.lua, batch 500) at that size, from SLOWLOG;
#   - register and rank latency at that size.
#
#   scripts/million.sh            # 1,000,000 users
#   scripts/million.sh 200000     # fewer
#   MILLION_REDIS_ARGS="--disable-thp no" scripts/million.sh   # Redis on huge pages
#     (needs /sys/kernel/mm/transparent_hugepage/enabled set to always)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-tools.sh
ensure_rust
ensure_packages wrk curl python3

users=${1:-1000000}
echo "Building the release binary ..." >&2
cargo build --release --locked --bin waitgate >&2

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

P_WG=19303 P_ADMIN=19304 P_REDIS=19305
# MILLION_REDIS_ARGS adds redis-server options, e.g. "--disable-thp no" to
# measure with transparent huge pages (see the README, "Script time").
# shellcheck disable=SC2086
redis-server --port $P_REDIS --bind 127.0.0.1 --save "" --appendonly no --daemonize no ${MILLION_REDIS_ARGS:-} >/dev/null &
pids+=($!)
R() { redis-cli -p $P_REDIS "$@"; }
for _ in $(seq 50); do R ping >/dev/null 2>&1 && break; sleep 0.1; done

JWT_SECRET=$(head -c 32 /dev/urandom | base64)
export JWT_SECRET
# Admission and cleanup are held off (7-day windows) so that this run
# measures them by calling the scripts itself, at a known size.
cat > "$work/waitgate.yaml" <<EOF
listen: 127.0.0.1:$P_WG
admin-listen: 127.0.0.1:$P_ADMIN
threads: 2
redis: {url: "redis://127.0.0.1:$P_REDIS/0"}
queues:
  big:
    heartbeat: {timeout-ms: 604800000, cleanup-interval-ms: 604800000}
    admission: {interval-ms: 604800000, batch-size: 100, max-active: 1}
upstreams: {}
routes: []
EOF
RUST_LOG=warn ./target/release/waitgate -c "$work/waitgate.yaml" &
pids+=($!)
for _ in $(seq 100); do curl -sf 127.0.0.1:$P_ADMIN/healthz >/dev/null && break; sleep 0.1; done
# One user takes the single active slot, so all the others stay waiting.
curl -s -X POST 127.0.0.1:$P_WG/api/v1/queue/register -H 'Content-Type: application/json' -d '{"userId":"first"}' >/dev/null
sleep 1
before=$(R INFO memory | tr -d '\r' | awk -F: '/^used_memory:/ {print $2}')

# Each wrk connection registers its own numbered users, until N in total.
cat > "$work/fill.lua" <<EOF
local conns, per = 0, 0
function setup(thread) thread:set("base", conns); conns = conns + 1 end
function init(args) n = 0; per = math.ceil($users / 64) end
request = function()
  n = n + 1
  if n > per then wrk.thread:stop() end
  return wrk.format("POST", "/api/v1/queue/register", {["Content-Type"] = "application/json"},
    '{"userId":"user-' .. base .. "-" .. n .. '"}')
end
EOF
echo "Registering $users users through the API ..." >&2
start=$(date +%s.%N)
# 64 wrk threads of one connection each, so every thread owns a numbering;
# stopped once Redis holds them all (a stopped wrk thread still waits out -d).
wrk -t64 -c64 -d900s -s "$work/fill.lua" http://127.0.0.1:$P_WG > "$work/fill.out" 2>&1 &
wrk_pid=$!
while kill -0 $wrk_pid 2>/dev/null; do
  [ "$(R ZCARD 'queue:{big}:waiting')" -ge "$users" ] && break
  sleep 0.5
done
kill $wrk_pid 2>/dev/null || true
wait $wrk_pid 2>/dev/null || true
took=$(python3 -c "print(round($(date +%s.%N) - $start, 1))")
waiting=$(R ZCARD 'queue:{big}:waiting')
heartbeat=$(R ZCARD 'queue:{big}:heartbeat')
credential=$(R HLEN 'queue:{big}:credential')
# Where the bytes are, per user, key by key.
usage() { R MEMORY USAGE "$1" SAMPLES 0 | tr -d '\r'; }
mem_waiting=$(usage 'queue:{big}:waiting') mem_heartbeat=$(usage 'queue:{big}:heartbeat')
after=$(R INFO memory | tr -d '\r' | awk -F: '/^used_memory:/ {print $2}')
per_user=$(python3 -c "print(round(($after - $before) / $waiting, 1))")

# Latency of the API at this size.
wrk -t1 -c16 -d5s --latency "http://127.0.0.1:$P_WG/api/v1/queue/rank?userId=user-0-500" > "$work/rank.out"
rank_p50=$(awk '$1=="50%" {print $2}' "$work/rank.out")
rank_p99=$(awk '$1=="99%" {print $2}' "$work/rank.out")
rank_rps=$(awk '/Requests\/sec/ {print $2}' "$work/rank.out")

# The scripts themselves, timed by Redis (SLOWLOG records every call here).
ADMIT=$(R SCRIPT LOAD "$(cat lua/lib.lua lua/admit.lua)")
CLEANUP=$(R SCRIPT LOAD "$(cat lua/lib.lua lua/cleanup.lua)")
K='queue:{big}'
R CONFIG SET slowlog-log-slower-than 0 >/dev/null
R CONFIG SET slowlog-max-len 1000 >/dev/null
time_script() { # runs "$@" 10 times, prints the durations (µs) Redis logged
  local out=()
  for _ in $(seq 10); do
    R SLOWLOG RESET >/dev/null
    "$@" >/dev/null
    # The entry of the script call (not of SLOWLOG RESET).
    out+=("$(R SLOWLOG GET 10 | python3 -c '
import sys
lines = sys.stdin.read().split()
# entries: id, timestamp, duration, then the command words
for i in range(len(lines) - 3):
    if lines[i + 3].upper() == "EVALSHA":
        print(lines[i + 2]); break
')")
  done
  echo "${out[@]}"
}
# Each admission needs an undecided window: forget the last one first.
admit_once() { R HDEL "$K:admission" window >/dev/null; R EVALSHA "$ADMIT" 5 "$K:waiting" "$K:heartbeat" "$K:active" "$K:admission" "$K:credential" 1000 100 600000 0; }
cleanup_once() { R EVALSHA "$CLEANUP" 4 "$K:waiting" "$K:heartbeat" "$K:credential" "$K:active" 1 500; }
admit_us=$(time_script admit_once)
waiting_after_admit=$(R ZCARD "$K:waiting")
cleanup_us=$(time_script cleanup_once)
waiting_after_cleanup=$(R ZCARD "$K:waiting")
# A script that failed would time as fast as one that worked: check that
# each call did its work.
if [ "$waiting_after_admit" -ne $((waiting - 1000)) ] || [ "$waiting_after_cleanup" -ne $((waiting_after_admit - 5000)) ]; then
  echo "the scripts did not do their work: waiting $waiting -> $waiting_after_admit -> $waiting_after_cleanup" >&2
  R EVALSHA "$ADMIT" 5 "$K:waiting" "$K:heartbeat" "$K:active" "$K:admission" "$K:credential" 1000 100 600000 0 >&2
  exit 1
fi

python3 - "$users" "$took" "$waiting" "$heartbeat" "$credential" "$before" "$after" "$per_user" \
  "$rank_rps" "$rank_p50" "$rank_p99" "$admit_us" "$cleanup_us" "$waiting_after_admit" "$waiting_after_cleanup" \
  "$mem_waiting" "$mem_heartbeat" <<'EOF'
import statistics, sys
(users, took, waiting, heartbeat, credential, before, after, per_user,
 rank_rps, rank_p50, rank_p99, admit_us, cleanup_us, w_admit, w_clean,
 mem_waiting, mem_heartbeat) = sys.argv[1:]
a = [int(x) for x in admit_us.split()]
c = [int(x) for x in cleanup_us.split()]
print(f"\n{int(waiting):,} users waiting (registered through the API in {took} s; heartbeat {int(heartbeat):,}, credential {int(credential):,})")
print(f"| Measure | Figure | Target |")
print(f"|---|---|---|")
print(f"| Redis memory per waiting user | {per_user} bytes (used_memory {int(before):,} -> {int(after):,}) | <= 250 bytes |")
print(f"| One admission of 100 at {int(waiting):,} waiting | median {statistics.median(a)/1000:.2f} ms, max {max(a)/1000:.2f} ms (10 calls; SLOWLOG) | < 5 ms |")
print(f"| One cleanup batch of 500 at that size | median {statistics.median(c)/1000:.2f} ms, max {max(c)/1000:.2f} ms (10 calls; SLOWLOG) | < 5 ms |")
print(f"| rank at that size (wrk -c16) | {rank_rps} req/s, p50 {rank_p50}, p99 {rank_p99} | |")
print(f"(MEMORY USAGE per user: waiting {int(mem_waiting) / int(waiting):.1f} bytes, heartbeat {int(mem_heartbeat) / int(waiting):.1f} bytes)")
print(f"(waiting after the admissions: {int(w_admit):,}; after the cleanups: {int(w_clean):,})")
EOF
