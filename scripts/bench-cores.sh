#!/usr/bin/env bash
# Throughput as the cores grow, side by side with nginx, in one run (the
# cores mode of scripts/bench.sh):
#
#   protected GET, and protected POST with a small JSON body, both with a
#   valid JWT: waitgate `threads: N` against nginx `worker_processes N`
#   (proxy_pass, upstream keepalive), N = 1 2 4 8, the same upstream for both
#   (nginx `return 200`, 4 workers), access logs off on both sides, wrk -t4
#   -c256, the two proxies alternated within each round.
#
# Pinned with taskset on a machine with C cores: the proxy under test on
# cores 0..N-1, the upstream on C-8..C-5, wrk and Redis on C-4..C-1. A row
# needs N + 8 cores; a row the machine has too few cores for is named and
# skipped. BENCH_SHARED=1 runs rows up to N = C anyway, with the upstream
# (1 worker) and wrk (-t1) unpinned, sharing the cores with the proxy: such
# rows say so, and compare only with each other.
#
#   scripts/bench.sh cores                 # 2 rounds of 6 s per row
#   scripts/bench.sh cores 3 10            # 3 rounds of 10 s
#   BENCH_CORES="1 2" scripts/bench.sh cores
#   BENCH_LANE_OFF=1 scripts/bench.sh cores
#                                          # also waitgate with `direct-lane: false`
#                                          # (every request through Pingora's proxy)
#   BENCH_BINARY=/tmp/waitgate-old scripts/bench.sh cores
#                                          # a build of waitgate's own instead
#                                          # of building this checkout's
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-tools.sh
ensure_rust
ensure_packages wrk nginx curl python3 taskset

rounds=${1:-2}
seconds=${2:-6}
machine=$(nproc)
shared=${BENCH_SHARED:-}

if [ -n "${BENCH_BINARY:-}" ]; then
  WAITGATE=$BENCH_BINARY
else
  echo "Building the release binary ..." >&2
  cargo build --release --locked --bin waitgate >&2
  WAITGATE=$RELEASE/waitgate
fi

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for conf in "$work"/nginx-*.conf; do
    if [ -f "$conf" ]; then nginx -p "$work" -c "$conf" -s stop 2>/dev/null || true; fi
  done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

P_UPSTREAM=19200 P_NGINX=19201 P_WG=19202 P_ADMIN=19203 P_REDIS=19204 P_OFF=19205 P_ADMIN_OFF=19206
lane_off=${BENCH_LANE_OFF:-}


# Where each part runs. Isolated: proxy 0..N-1, upstream C-8..C-5, load
# C-4..C-1. Shared: only the proxy is pinned.
if [ -n "$shared" ]; then
  upstream_workers=1 load_threads=1 redis_cores=0-$((machine - 1))
  pin_upstream() { "$@"; }
  pin_load() { "$@"; }
else
  upstream_workers=4 load_threads=4 redis_cores=$((machine - 4))-$((machine - 1))
  pin_upstream() { taskset -c "$((machine - 8))-$((machine - 5))" "$@"; }
  pin_load() { taskset -c "$((machine - 4))-$((machine - 1))" "$@"; }
fi
pin_proxy() { # N, command...
  local n=$1; shift
  taskset -c "0-$((n - 1))" "$@"
}

nginx_conf() { # name, workers, server block
  mkdir -p "$work/$1"
  cat > "$work/nginx-$1.conf" <<EOF
worker_processes $2;
pid $work/$1/nginx.pid;
error_log $work/$1/error.log warn;
events { worker_connections 8192; }
worker_rlimit_nofile 20000;
http {
  access_log off;
  client_body_temp_path $work/$1/body;
  proxy_temp_path $work/$1/proxy;
  fastcgi_temp_path $work/$1/fastcgi;
  uwsgi_temp_path $work/$1/uwsgi;
  scgi_temp_path $work/$1/scgi;
  keepalive_requests 1000000;
  $3
}
EOF
}

nginx_conf upstream "$upstream_workers" \
  "server { listen 127.0.0.1:$P_UPSTREAM backlog=4096; location / { return 200 'ok'; } }"
pin_upstream nginx -p "$work" -c "$work/nginx-upstream.conf"
wait_port $P_UPSTREAM

taskset -c "$redis_cores" redis-server --port $P_REDIS --bind 127.0.0.1 --save "" --appendonly no --daemonize no >/dev/null &
pids+=($!)
wait_port $P_REDIS

JWT_SECRET=$(head -c 32 /dev/urandom | base64)
export JWT_SECRET
waitgate_conf() { # threads, port, admin port
  cat <<EOF
listen: 127.0.0.1:$2
admin-listen: 127.0.0.1:$3
threads: $1
max-connections: 12000
log: {access: false}
jwt: {ttl-ms: 3600000}
redis: {url: "redis://127.0.0.1:$P_REDIS/0"}
queues:
  bench:
    heartbeat: {timeout-ms: 3600000, cleanup-interval-ms: 60000}
    admission: {interval-ms: 1000, batch-size: 100, active-ttl-ms: 3600000, max-active: 1}
upstreams:
  up: {address: "127.0.0.1:$P_UPSTREAM"}
routes:
  - {prefix: /api/v1/follow-up, upstream: up, queue: bench}
EOF
}

start_pair() { # N: nginx with N workers and waitgate with N threads, both on 0..N-1
  nginx_conf "proxy$1" "$1" "upstream up { server 127.0.0.1:$P_UPSTREAM; keepalive 256; }
  server { listen 127.0.0.1:$P_NGINX backlog=4096; location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection \"\"; } }"
  pin_proxy "$1" nginx -p "$work" -c "$work/nginx-proxy$1.conf"
  waitgate_conf "$1" $P_WG $P_ADMIN > "$work/waitgate-$1.yaml"
  # taskset itself, not a function: the pid is then waitgate's.
  RUST_LOG=warn taskset -c "0-$(($1 - 1))" "$WAITGATE" -c "$work/waitgate-$1.yaml" \
    > "$work/waitgate-$1.log" 2>&1 &
  WG_PID=$!
  pids+=("$WG_PID")
  OFF_PID=
  if [ -n "$lane_off" ]; then
    { echo "direct-lane: false"; waitgate_conf "$1" $P_OFF $P_ADMIN_OFF; } > "$work/waitgate-off-$1.yaml"
    RUST_LOG=warn taskset -c "0-$(($1 - 1))" "$WAITGATE" -c "$work/waitgate-off-$1.yaml" \
      > "$work/waitgate-off-$1.log" 2>&1 &
    OFF_PID=$!
    pids+=("$OFF_PID")
    wait_port $P_OFF
  fi
  wait_port $P_NGINX
  wait_port $P_WG
}
stop_pair() { # N
  kill "$WG_PID" $OFF_PID
  wait "$WG_PID" $OFF_PID 2>/dev/null || true
  nginx -p "$work" -c "$work/nginx-proxy$1.conf" -s stop
  for _ in $(seq 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$P_NGINX") 2>/dev/null || (exec 3<>"/dev/tcp/127.0.0.1/$P_WG") 2>/dev/null || return 0
    sleep 0.1
  done
}

json_field() { sed -n "s/.*\"$1\":\"\\([^\"]*\\)\".*/\\1/p"; }
# A real token through the real flow: register, get admitted, exchange. It
# stays good for every waitgate started later with the same secret.
get_token() {
  local cred token user="bench-$RANDOM$RANDOM"
  cred=$(curl -s -X POST 127.0.0.1:$P_WG/api/v1/queue/register -H 'Content-Type: application/json' \
    -d "{\"userId\":\"$user\"}" | json_field queueCredential)
  for _ in $(seq 50); do
    curl -s "127.0.0.1:$P_WG/api/v1/queue/rank?userId=$user" | grep -q ACTIVE && break
    sleep 0.2
  done
  token=$(curl -s -X POST 127.0.0.1:$P_WG/api/v1/queue/active/token -H 'Content-Type: application/json' \
    -d "{\"userId\":\"$user\",\"queueCredential\":\"$cred\"}" | json_field accessToken)
  [ -n "$token" ] || { echo "could not get a token" >&2; exit 1; }
  echo "$token"
}

cat > "$work/status.lua" <<'EOF'
-- Counts answers that were not a success, so a run that errors cannot pass
-- for a fast one.
local bad = 0
response = function(status, headers, body)
  if status >= 300 then bad = bad + 1 end
end
done = function(summary, latency, requests)
  io.write(string.format("BAD %d\n", bad + summary.errors.connect + summary.errors.read
    + summary.errors.write + summary.errors.timeout))
end
EOF
# A booking: POST with a small JSON body (60 bytes), length-framed.
{
  echo 'wrk.method = "POST"'
  echo "wrk.body = '{\"show\":\"2026-12-24T19:00\",\"seat\":\"R-12\",\"quantity\":2}'"
  echo 'wrk.headers["Content-Type"] = "application/json"'
  cat "$work/status.lua"
} > "$work/post.lua"

run_wrk() { # N, round, label, script, url, extra args...
  local n=$1 round=$2 label=$3 script=$4 url=$5; shift 5
  pin_load wrk -t$load_threads -c256 -d"${seconds}"s -s "$work/$script" "$@" "$url" > "$work/wrk.out" 2>&1
  local rps bad
  rps=$(awk '/Requests\/sec/ {print $2}' "$work/wrk.out")
  bad=$(awk '/^BAD/ {print $2}' "$work/wrk.out")
  echo "$n $round $label ${rps:-0} ${bad:-0}" >> "$work/results"
  printf '  N=%s round %s %-14s %10s req/s  errors %s\n' "$n" "$round" "$label" "${rps:-0}" "${bad:-0}" >&2
}

: > "$work/results"
: > "$work/skipped"
token=""
for n in ${BENCH_CORES:-1 2 4 8}; do
  if [ -n "$shared" ]; then
    if [ "$n" -gt "$machine" ]; then
      echo "$n $n threads need $n cores; this machine has $machine" >> "$work/skipped"
      continue
    fi
  elif [ $((n + 8)) -gt "$machine" ]; then
    echo "$n needs $((n + 8)) cores ($n for the proxy, 4 for the upstream, 4 for wrk); this machine has $machine (BENCH_SHARED=1 runs it unisolated)" >> "$work/skipped"
    continue
  fi
  echo "N=$n" >&2
  start_pair "$n"
  [ -n "$token" ] || token=$(get_token)
  auth=(-H "Authorization: Bearer $token")
  url=/api/v1/follow-up/seat
  for round in $(seq "$rounds"); do
    run_wrk "$n" "$round" nginx-get status.lua "http://127.0.0.1:$P_NGINX$url"
    run_wrk "$n" "$round" waitgate-get status.lua "http://127.0.0.1:$P_WG$url" "${auth[@]}"
    run_wrk "$n" "$round" nginx-post post.lua "http://127.0.0.1:$P_NGINX$url"
    run_wrk "$n" "$round" waitgate-post post.lua "http://127.0.0.1:$P_WG$url" "${auth[@]}"
    if [ -n "$lane_off" ]; then
      run_wrk "$n" "$round" lane-off-get status.lua "http://127.0.0.1:$P_OFF$url" "${auth[@]}"
      run_wrk "$n" "$round" lane-off-post post.lua "http://127.0.0.1:$P_OFF$url" "${auth[@]}"
    fi
  done
  stop_pair "$n"
done

python3 - "$work/results" "$work/skipped" "$rounds" "$seconds" "$machine" "${shared:+shared}" <<'EOF'
import statistics, sys
results, skipped, rounds, seconds, machine, shared = sys.argv[1:7]
runs = {}
for line in open(results):
    n, rnd, label, rps, bad = line.split()
    runs.setdefault(int(n), {}).setdefault(label, []).append((float(rps), int(bad)))
def span(values):
    lo, hi = min(values), max(values)
    return f"{lo/1000:.1f}k" if round(lo, -2) == round(hi, -2) else f"{lo/1000:.1f}-{hi/1000:.1f}k"
def ratios(row, a, b):
    # Per round: each pair ran back to back.
    return [x[0] / y[0] for x, y in zip(row[a], row[b]) if y[0] > 0]
def span_ratio(values):
    lo, hi = min(values), max(values)
    return f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}"
print()
print(f"waitgate cores mode: {rounds} rounds x {seconds} s per measure, wrk -c256, "
      f"access logs off, machine of {machine} cores")
if shared:
    print("SHARED: the upstream and wrk share the cores with the proxy; these rows compare "
          "only with each other, not with an isolated table")
else:
    print("isolated: proxy on cores 0..N-1, upstream nginx (4 workers) on C-8..C-5, wrk -t4 on C-4..C-1")
print()
off = any("lane-off-get" in row for row in runs.values())
header = "| cores (threads / worker_processes) | nginx GET | waitgate GET | ratio | nginx POST | waitgate POST | ratio |"
if off:
    header += " lane off GET | ratio | lane off POST | ratio |"
print(header + " errors |")
print("|---" * header.count("|") + "|")
for n in sorted(runs):
    row = runs[n]
    errors = sum(b for label in row for _, b in row[label])
    line = (f"| {n} | {span([r[0] for r in row['nginx-get']])} | {span([r[0] for r in row['waitgate-get']])} "
            f"| {span_ratio(ratios(row, 'waitgate-get', 'nginx-get'))} "
            f"| {span([r[0] for r in row['nginx-post']])} | {span([r[0] for r in row['waitgate-post']])} "
            f"| {span_ratio(ratios(row, 'waitgate-post', 'nginx-post'))} |")
    if off:
        line += (f" {span([r[0] for r in row['lane-off-get']])} | {span_ratio(ratios(row, 'lane-off-get', 'nginx-get'))} "
                 f"| {span([r[0] for r in row['lane-off-post']])} | {span_ratio(ratios(row, 'lane-off-post', 'nginx-post'))} |")
    print(line + f" {errors} |")
for line in open(skipped):
    n, why = line.split(" ", 1)
    print(f"| {n} | skipped: {why.strip()} |" + " |" * (header.count("|") - 2))
EOF
