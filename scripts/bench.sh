#!/usr/bin/env bash
# Measures waitgate side by side with its references, in one run, on loopback:
#
#   protected GET with a valid JWT   vs  a bare Pingora pass-through (examples/bare_proxy.rs)
#                                         and nginx proxy_pass, same upstream (nginx `return 200`);
#                                         with the direct lane on (the default) and off
#                                         (`direct-lane: false`, every request through Pingora)
#   register / rank requests/s       vs  redis-benchmark EVALSHA of the same Lua scripts
#   Redis commands per API call      from INFO commandstats
#   RSS with 10,000 idle keep-alive connections, waitgate vs nginx
#
# `scripts/bench.sh cores` measures instead how both grow with the cores
# (threads 1, 2, 4, 8 against nginx worker_processes 1, 2, 4, 8, pinned):
# scripts/bench-cores.sh says how.
#
# Every reference runs in the same rounds as what it is compared with (A/B
# alternation), and the table shows medians over the rounds and their ratio.
# It checks for what it needs (nginx, wrk, redis; it says what to install), starts everything itself and
# leaves nothing running.
#
#   scripts/bench.sh              # 3 rounds of 10 s per measure
#   scripts/bench.sh 5 20         # 5 rounds of 20 s
#   BENCH_BASELINE=/path/to/waitgate scripts/bench.sh
#                                 # also an earlier build, same config, same rounds
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = cores ]; then
  shift
  exec scripts/bench-cores.sh "$@"
fi
. scripts/ensure-tools.sh
ensure_rust
ensure_packages wrk nginx curl python3

rounds=${1:-3}
seconds=${2:-10}
connections=64

echo "Building release binaries ..." >&2
cargo build --release --locked --bin waitgate --example bare_proxy >&2

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for conf in "$work"/nginx-*.conf; do
    if [ -f "$conf" ]; then nginx -p "$work" -c "$conf" -s stop 2>/dev/null || true; fi
  done
  wait 2>/dev/null || true
  [ -n "${BENCH_KEEP:-}" ] && cp -r "$work" /tmp/bench-work; rm -rf "$work"
}
trap cleanup EXIT INT TERM

# Ports, away from the usual ones.
P_UPSTREAM=19100 P_NGINX=19101 P_BARE=19102 P_WG=19103 P_ADMIN=19104 P_REDIS=19105
P_WG_OFF=19106 P_ADMIN_OFF=19107 P_WG_BASE=19108 P_ADMIN_BASE=19109


# --- nginx: the upstream (return 200) and the reference proxy, one worker each
nginx_conf() { # name, server block
  mkdir -p "$work/logs" "$work/$1"
  cat > "$work/nginx-$1.conf" <<EOF
worker_processes 1;
pid $work/$1/nginx.pid;
error_log $work/$1/error.log warn;
events { worker_connections 16384; }
worker_rlimit_nofile 20000;
http {
  access_log off;
  client_body_temp_path $work/$1/body;
  proxy_temp_path $work/$1/proxy;
  fastcgi_temp_path $work/$1/fastcgi;
  uwsgi_temp_path $work/$1/uwsgi;
  scgi_temp_path $work/$1/scgi;
  keepalive_requests 1000000;
  $2
}
EOF
  nginx -p "$work" -c "$work/nginx-$1.conf"
}
nginx_conf upstream "server { listen 127.0.0.1:$P_UPSTREAM; location / { return 200 'ok'; } }"
nginx_conf proxy "upstream up { server 127.0.0.1:$P_UPSTREAM; keepalive 64; }
  server { listen 127.0.0.1:$P_NGINX; location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection \"\"; } }"
wait_port $P_UPSTREAM
wait_port $P_NGINX

# --- the bare Pingora reference, one thread
"$RELEASE"/examples/bare_proxy 127.0.0.1:$P_BARE 127.0.0.1:$P_UPSTREAM 1 2>/dev/null &
BARE_PID=$!
pids+=("$BARE_PID")
wait_port $P_BARE

# --- Redis, our own, nothing on disk
redis-server --port $P_REDIS --bind 127.0.0.1 --save "" --appendonly no --daemonize no >/dev/null &
pids+=($!)
wait_port $P_REDIS

# --- waitgate, one proxy thread like the references
JWT_SECRET=$(head -c 32 /dev/urandom | base64)
export JWT_SECRET
waitgate_conf() { # listen port, admin port
  cat <<EOF
listen: 127.0.0.1:$1
admin-listen: 127.0.0.1:$2
threads: 1
client-header-timeout-ms: 120000
max-connections: 12000
# The token outlives every run (the default 10 minutes did not outlive five
# rounds: the last one's protected GETs were 401s).
jwt: {ttl-ms: 3600000}
redis:
  url: redis://127.0.0.1:$P_REDIS/0
queues:
  bench:
    heartbeat: {timeout-ms: 3600000, cleanup-interval-ms: 60000}
    # One active slot: the token's user takes it, so everyone else stays
    # waiting and rank keeps exercising the waiting path.
    admission: {interval-ms: 3000, batch-size: 100, active-ttl-ms: 3600000, max-active: 1}
upstreams:
  up: {address: "127.0.0.1:$P_UPSTREAM"}
routes:
  - {prefix: /api/v1/follow-up, upstream: up, queue: bench}
EOF
}
waitgate_conf $P_WG $P_ADMIN > "$work/waitgate.yaml"
RUST_LOG=warn "$RELEASE"/waitgate -c "$work/waitgate.yaml" &
WG_PID=$!
pids+=("$WG_PID")
wait_port $P_WG
# The same with the direct lane off: every request through Pingora's proxy.
{ echo "direct-lane: false"; waitgate_conf $P_WG_OFF $P_ADMIN_OFF; } > "$work/waitgate-off.yaml"
RUST_LOG=warn "$RELEASE"/waitgate -c "$work/waitgate-off.yaml" &
WG_OFF_PID=$!
pids+=("$WG_OFF_PID")
wait_port $P_WG_OFF
if [ -n "${BENCH_BASELINE:-}" ]; then
  waitgate_conf $P_WG_BASE $P_ADMIN_BASE > "$work/waitgate-base.yaml"
  RUST_LOG=warn "$BENCH_BASELINE" -c "$work/waitgate-base.yaml" &
  WG_BASE_PID=$!
  pids+=("$WG_BASE_PID")
  wait_port $P_WG_BASE
fi

json_field() { sed -n "s/.*\"$1\":\"\\([^\"]*\\)\".*/\\1/p"; }

# A real token through the real flow: register, get admitted, exchange.
cred=$(curl -s -X POST 127.0.0.1:$P_WG/api/v1/queue/register -H 'Content-Type: application/json' \
  -d '{"userId":"bench-token"}' | json_field queueCredential)
for _ in $(seq 50); do
  curl -s "127.0.0.1:$P_WG/api/v1/queue/rank?userId=bench-token" | grep -q ACTIVE && break
  sleep 0.2
done
token=$(curl -s -X POST 127.0.0.1:$P_WG/api/v1/queue/active/token -H 'Content-Type: application/json' \
  -d "{\"userId\":\"bench-token\",\"queueCredential\":\"$cred\"}" | json_field accessToken)
[ -n "$token" ] || { echo "could not get a token" >&2; exit 1; }
# A waiting user to poll (max-active 1 keeps it waiting).
curl -s -X POST 127.0.0.1:$P_WG/api/v1/queue/register -H 'Content-Type: application/json' \
  -d '{"userId":"bench-rank"}' >/dev/null

cat > "$work/register.lua" <<'EOF'
local counter = 0
local threads = 0
function setup(thread) thread:set("id", threads); threads = threads + 1 end
function init(args) prefix = "b" .. id .. "-" .. math.random(1, 1000000000) .. "-" end
request = function()
  counter = counter + 1
  return wrk.format("POST", "/api/v1/queue/register",
    {["Content-Type"] = "application/json"}, '{"userId":"' .. prefix .. counter .. '"}')
end
EOF
cat > "$work/status.lua" <<'EOF'
-- Counts answers by status, so a run that errors cannot pass for a fast one.
-- Also shows the first answer that was not a success.
local first_bad = nil
response = function(status, headers, body)
  if status >= 300 and not first_bad then
    first_bad = status .. " " .. body
    io.write("FIRST " .. first_bad .. "\n")
  end
end
done = function(summary, latency, requests)
  local bad = summary.errors.status + summary.errors.connect + summary.errors.read
    + summary.errors.write + summary.errors.timeout
  io.write(string.format("BAD %d\n", bad))
end
EOF
cat "$work/status.lua" >> "$work/register.lua"

# CPU time (user + system, all threads) the processes have used, in clock ticks.
cpu_ticks() { # pids...
  local total=0 pid
  for pid in "$@"; do total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat"))); done
  echo "$total"
}
# The processes that do a label's proxying, for its CPU per request; none
# for the queue API rows.
proxy_pids() { # label
  case "$1" in
    bare) echo "$BARE_PID" ;;
    waitgate) echo "$WG_PID" ;;
    lane-off) echo "$WG_OFF_PID" ;;
    baseline | baseline-close) echo "${WG_BASE_PID:-}" ;;
    close) echo "$WG_PID" ;;
    nginx) cat "$work/proxy/nginx.pid"; pgrep -P "$(cat "$work/proxy/nginx.pid")" ;;
  esac
}

# wrk one thread, 64 connections, like the targets were measured.
run_wrk() { # label, extra args...
  local label=$1; shift
  local watched cpu_before cpu_after
  # shellcheck disable=SC2207
  watched=($(proxy_pids "$label"))
  cpu_before=$(cpu_ticks "${watched[@]}")
  wrk -t1 -c$connections -d"${seconds}"s --latency "$@" > "$work/wrk.out" 2>&1
  cpu_after=$(cpu_ticks "${watched[@]}")
  local rps p99 bad requests cpu=-
  requests=$(awk '/requests in/ {print $1}' "$work/wrk.out")
  if [ "${#watched[@]}" -gt 0 ] && [ "${requests:-0}" -gt 0 ]; then
    # Microseconds of the proxy's CPU per request.
    cpu=$(python3 -c "print(f'{($cpu_after - $cpu_before) * 1e6 / $(getconf CLK_TCK) / $requests:.2f}')")
  fi
  rps=$(awk '/Requests\/sec/ {print $2}' "$work/wrk.out")
  p99=$(awk '$1=="99%" {print $2}' "$work/wrk.out")
  bad=$(awk '/^BAD/ {print $2}' "$work/wrk.out")
  non2xx=$(awk '/Non-2xx/ {print $NF}' "$work/wrk.out")
  cp "$work/wrk.out" "$work/wrk-$label.out"
  echo "$label $rps $p99 ${bad:-0} ${non2xx:-0} $cpu" >> "$work/results"
  printf '  %-10s %10s req/s  p99 %8s  errors %s non-2xx %s  proxy CPU %s us/request\n' "$label" "$rps" "$p99" "${bad:-0}" "${non2xx:-0}" "$cpu" >&2
  grep '^FIRST' "$work/wrk.out" | head -1 >&2 || true
}

# redis-benchmark of the very scripts waitgate runs (lua/lib.lua + the script).
load_script() { cat lua/lib.lua "lua/$1" > "$work/redis-$1"; redis-cli -p $P_REDIS SCRIPT LOAD "$(cat "$work/redis-$1")"; }
REG_SHA=$(load_script register.lua)
RANK_SHA=$(load_script rank.lua)
K='queue:{bench}'
run_redis_bench() { # label, command...
  local label=$1; shift
  local rps
  # redis-benchmark counts error replies as requests: the reference must be
  # a call that works (the script's keys and arguments as waitgate sends them).
  local probe
  probe=$(redis-cli -p $P_REDIS "${@//__rand_int__/probe}" 2>&1 | head -1)
  case "$probe" in
    *ERR*) echo "the reference call fails: $probe" >&2; exit 1 ;;
  esac
  rps=$(redis-benchmark -p $P_REDIS -c 50 -n 400000 -r 100000000 -q "$@" 2>/dev/null \
    | tr '\r' '\n' | awk '/requests per second/ {print $(NF-5)}' | tail -1)
  echo "$label $rps - 0 0 -" >> "$work/results"
  printf '  %-10s %10s req/s\n' "$label" "$rps" >&2
}

# Redis counts the commands a script runs inside it too, so round trips are
# counted by kind: EVALSHA calls for the queue API (every call is one
# script), and every command processed for the protected route (which must
# make none).
evalsha_calls() { redis-cli -p $P_REDIS INFO commandstats | tr -d '\r' | awk -F'[:=,]' '/^cmdstat_(evalsha|eval|evalsha_ro|eval_ro):/ {s += $3} END {print s + 0}'; }
all_commands() { redis-cli -p $P_REDIS INFO stats | tr -d '\r' | awk -F: '/^total_commands_processed/ {print $2}'; }

: > "$work/results"
for round in $(seq "$rounds"); do
  echo "round $round/$rounds" >&2
  run_wrk bare http://127.0.0.1:$P_BARE/api/v1/follow-up/seat -s "$work/status.lua"
  run_wrk waitgate http://127.0.0.1:$P_WG/api/v1/follow-up/seat -H "Authorization: Bearer $token" -s "$work/status.lua"
  run_wrk lane-off http://127.0.0.1:$P_WG_OFF/api/v1/follow-up/seat -H "Authorization: Bearer $token" -s "$work/status.lua"
  if [ -n "${BENCH_BASELINE:-}" ]; then
    run_wrk baseline http://127.0.0.1:$P_WG_BASE/api/v1/follow-up/seat -H "Authorization: Bearer $token" -s "$work/status.lua"
    # A client connection per request (and so, since upstream connections
    # are kept per client connection, an upstream connection per request).
    run_wrk close http://127.0.0.1:$P_WG/api/v1/follow-up/seat -H "Authorization: Bearer $token" \
      -H "Connection: close" -s "$work/status.lua"
    run_wrk baseline-close http://127.0.0.1:$P_WG_BASE/api/v1/follow-up/seat -H "Authorization: Bearer $token" \
      -H "Connection: close" -s "$work/status.lua"
  fi
  run_wrk nginx http://127.0.0.1:$P_NGINX/api/v1/follow-up/seat -s "$work/status.lua"
  run_wrk register http://127.0.0.1:$P_WG -s "$work/register.lua"
  run_redis_bench evalsha-reg EVALSHA "$REG_SHA" 13 "$K:waiting" "$K:heartbeat" "$K:credential" "$K:active" "$K:admission" \
    "$K:control" "$K:prequeue" "$K:due" "$K:dues" "$K:proofs" "$K:numbering" "$K:marks" "$K:arrivals" \
    3000 100 30000 1000 30000 1 0 "r:__rand_int__"
  run_wrk rank "http://127.0.0.1:$P_WG/api/v1/queue/rank?userId=bench-rank" -s "$work/status.lua"
  run_redis_bench evalsha-rank EVALSHA "$RANK_SHA" 10 "$K:waiting" "$K:heartbeat" "$K:active" "$K:admission" \
    "$K:control" "$K:prequeue" "$K:due" "$K:dues" "$K:numbering" "$K:marks" \
    3000 100 30000 1000 30000 0 0 1000 bench-rank
done

# Redis commands per call, from INFO commandstats over a counted number of
# calls, less what the background tasks sent in the same time (measured over
# an idle stretch just as long).
per_call() { # counter, n, curl args...
  local commandstats=$1 n=$2; shift 2
  local before after start took idle_before idle_after
  start=$(date +%s.%N)
  before=$($commandstats)
  for _ in $(seq "$n"); do curl -s -o /dev/null "$@"; done
  after=$($commandstats)
  took=$(python3 -c "print($(date +%s.%N) - $start)")
  idle_before=$($commandstats)
  sleep "$took"
  idle_after=$($commandstats)
  python3 -c "print(f'{max(0, ($after - $before) - ($idle_after - $idle_before)) / $n:.3f}')"
}
# The load above left millions waiting, and every instance samples a big
# waiting set every 5 s (src/store/ranks.rs), a burst of script calls that
# an idle stretch of the same length subtracts only by luck. So the calls
# per request are counted on the queue started anew: a first user (who
# takes the one active slot) and bench-rank behind it.
redis-cli -p $P_REDIS FLUSHALL >/dev/null
for user in bench-first bench-rank; do
  curl -s -o /dev/null -X POST 127.0.0.1:$P_WG/api/v1/queue/register -H 'Content-Type: application/json' \
    -d "{\"userId\":\"$user\"}"
done
sleep 1
# The protected route's commands over a short wrk run: tens of thousands of
# requests, against which the background tasks' few commands a second
# (counted in) weigh nothing, where 500 sequential requests less an idle
# stretch read 0.00 to 0.04 from run to run.
protected_calls() {
  local before after n
  before=$(all_commands)
  wrk -t1 -c8 -d2s -H "Authorization: Bearer $token" "http://127.0.0.1:$P_WG/api/v1/follow-up/seat" \
    > "$work/calls.out" 2>&1
  after=$(all_commands)
  if grep -q 'Non-2xx\|Socket errors' "$work/calls.out"; then
    echo "the protected GETs counted for Redis commands failed:" >&2
    cat "$work/calls.out" >&2
    exit 1
  fi
  n=$(awk '/requests in/ {print $1}' "$work/calls.out")
  python3 -c "print(f'{($after - $before) / $n:.4f}')"
}
CALLS_PROTECTED=$(protected_calls)
CALLS_RANK=$(per_call evalsha_calls 500 "127.0.0.1:$P_WG/api/v1/queue/rank?userId=bench-rank")
CALLS_REGISTER=$(per_call evalsha_calls 500 -X POST 127.0.0.1:$P_WG/api/v1/queue/register -H 'Content-Type: application/json' -d '{"userId":"calls-same"}')

# RSS with 10,000 idle keep-alive connections (each has made one request).
rss_kb() { awk '/VmRSS/ {s += $2} END {print s}' "$@"; }
hold_connections() { # port, path, count -> holds them until stdin closes
  python3 - "$1" "$2" "$3" <<'EOF'
import socket, sys, time
port, path, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
held = []
for i in range(count):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    held.append(s)
for s in held:
    s.recv(4096)
print("held", flush=True)
sys.stdin.read()
EOF
}
nginx_pids() { cat "$work/proxy/nginx.pid"; pgrep -P "$(cat "$work/proxy/nginx.pid")"; }
# The pid lists are split into words on purpose.
# shellcheck disable=SC2046,SC2086
measure_rss() { # label, port, path, pids...
  local label=$1 port=$2 path=$3; shift 3
  local before after
  before=$(rss_kb $(for p in "$@"; do echo /proc/$p/status; done))
  exec 7> >(hold_connections "$port" "$path" 10000 > "$work/hold.out")
  for _ in $(seq 600); do grep -q held "$work/hold.out" 2>/dev/null && break; sleep 0.1; done
  sleep 1
  after=$(rss_kb $(for p in "$@"; do echo /proc/$p/status; done))
  exec 7>&-
  sleep 1
  echo "$label $before $after" >> "$work/rss"
}
: > "$work/rss"
if [ -n "${BENCH_SKIP_RSS:-}" ]; then
  echo "waitgate 0 1" >> "$work/rss"; echo "nginx 0 1" >> "$work/rss"
else
measure_rss waitgate $P_WG /api/v1/follow-up/seat "$WG_PID"
# shellcheck disable=SC2046
measure_rss nginx $P_NGINX /api/v1/follow-up/seat $(nginx_pids)
fi

python3 - "$work/results" "$work/rss" "$rounds" "$seconds" \
  "$CALLS_PROTECTED" "$CALLS_RANK" "$CALLS_REGISTER" <<'EOF'
import statistics, sys
results, rss_file, rounds, seconds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
calls_protected, calls_rank, calls_register = sys.argv[5:8]
runs = {}
for line in open(results):
    label, rps, p99, bad, non2xx, cpu = line.split()
    runs.setdefault(label, []).append((float(rps), p99, int(bad), int(non2xx), cpu))
def ms(text):
    for unit, f in (("us", 0.001), ("ms", 1.0), ("s", 1000.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * f
    return float("nan")
def med(label):
    return statistics.median(r[0] for r in runs[label])
def med_p99(label):
    return statistics.median(ms(r[1]) for r in runs[label])
def errors(label):
    return sum(r[2] + r[3] for r in runs[label])
def ratio(a, b):
    # The median of the per-round ratios: each pair ran back to back, so
    # the machine's drift between rounds cancels out.
    return statistics.median(x[0] / y[0] for x, y in zip(runs[a], runs[b]))
def med_cpu(label):
    return statistics.median(float(r[4]) for r in runs[label])
def cpu_ratio(a, b):
    return statistics.median(float(x[4]) / float(y[4]) for x, y in zip(runs[a], runs[b]))
def p99_delta(a, b):
    return statistics.median(ms(x[1]) - ms(y[1]) for x, y in zip(runs[a], runs[b]))
rows = []
def row(measure, value, reference, ratio, target, ok):
    rows.append((measure, value, reference, ratio, target, "yes" if ok else "NO"))
b, w, n = med("bare"), med("waitgate"), med("nginx")
rb, rn = ratio("waitgate", "bare"), ratio("waitgate", "nginx")
row("protected GET, lane on, req/s", f"{w:,.0f}", f"bare Pingora {b:,.0f}", f"{rb:.2f}x", ">= 2x", rb >= 2.0)
row("protected GET, lane on, req/s", f"{w:,.0f}", f"nginx {n:,.0f}", f"{rn:.2f}x", ">= 0.8x", rn >= 0.8)
pw, pb, dp = med_p99("waitgate"), med_p99("bare"), p99_delta("waitgate", "bare")
row("protected GET, lane on, p99", f"{pw:.2f} ms", f"bare Pingora {pb:.2f} ms", f"{dp:+.2f} ms", "<= +1 ms", dp <= 1.0)
o, ro = med("lane-off"), ratio("lane-off", "bare")
row("protected GET, lane off, req/s", f"{o:,.0f}", f"bare Pingora {b:,.0f}", f"{ro:.2f}x", "report", True)
row("protected GET, lane off, req/s", f"{o:,.0f}", f"nginx {n:,.0f}", f"{ratio('lane-off', 'nginx'):.2f}x", "report", True)
po, do = med_p99("lane-off"), p99_delta("lane-off", "bare")
row("protected GET, lane off, p99", f"{po:.2f} ms", f"bare Pingora {pb:.2f} ms", f"{do:+.2f} ms", "report", True)
# CPU per request of the proxy process alone (user + system, from
# /proc/<pid>/stat): steadier than req/s on a shared machine, where the
# load generator and the upstream compete for the same cores.
cw, cb, cn, co = med_cpu("waitgate"), med_cpu("bare"), med_cpu("nginx"), med_cpu("lane-off")
row("protected GET, proxy CPU per request, lane on", f"{cw:.1f} us", f"bare Pingora {cb:.1f} us", f"{cpu_ratio('waitgate', 'bare'):.2f}x", "report", True)
row("protected GET, proxy CPU per request, lane on", f"{cw:.1f} us", f"nginx {cn:.1f} us", f"{cpu_ratio('waitgate', 'nginx'):.2f}x", "report", True)
row("protected GET, proxy CPU per request, lane off", f"{co:.1f} us", f"bare Pingora {cb:.1f} us", f"{cpu_ratio('lane-off', 'bare'):.2f}x", "report", True)
if "baseline" in runs:
    row("protected GET, lane on vs BENCH_BASELINE build", f"{w:,.0f}", f"baseline {med('baseline'):,.0f}", f"{ratio('waitgate', 'baseline'):.2f}x", "report", True)
    row("protected GET, Connection: close, vs BENCH_BASELINE build", f"{med('close'):,.0f}", f"baseline {med('baseline-close'):,.0f}", f"{ratio('close', 'baseline-close'):.2f}x", "report", True)
    row("protected GET, Connection: close, proxy CPU per request", f"{med_cpu('close'):.1f} us", f"baseline {med_cpu('baseline-close'):.1f} us", f"{cpu_ratio('close', 'baseline-close'):.2f}x", "report", True)
r, rr, q = med("register"), med("evalsha-reg"), ratio("register", "evalsha-reg")
row("register, req/s", f"{r:,.0f}", f"EVALSHA register.lua {rr:,.0f}", f"{q:.2f}x", ">= 0.5x (aim 0.8x)", q >= 0.5)
k, kr, q = med("rank"), med("evalsha-rank"), ratio("rank", "evalsha-rank")
row("rank, req/s", f"{k:,.0f}", f"EVALSHA rank.lua {kr:,.0f}", f"{q:.2f}x", ">= 0.5x", q >= 0.5)
row("bare Pingora vs nginx (context)", f"{b:,.0f}", f"nginx {n:,.0f}", f"{ratio('bare', 'nginx'):.2f}x", "context", True)
row("Redis round trips per register", calls_register, "EVALSHA calls, INFO commandstats", "", "1", 0.95 <= float(calls_register) <= 1.05)
row("Redis round trips per rank", calls_rank, "EVALSHA calls, INFO commandstats", "", "1", 0.95 <= float(calls_rank) <= 1.05)
row("Redis commands per protected GET", calls_protected, "all commands, INFO stats", "", "0", float(calls_protected) <= 0.05)
rss = {l.split()[0]: (int(l.split()[1]), int(l.split()[2])) for l in open(rss_file)}
wb, wa = rss["waitgate"]
nb, na = rss["nginx"]
row("RSS, 10,000 idle keep-alive conns", f"{wa/1024:.1f} MiB (+{(wa-wb)/1024:.1f})",
    f"nginx {na/1024:.1f} MiB (+{(na-nb)/1024:.1f})", f"{wa/na:.2f}x", "report", True)
print(f"\nwaitgate benchmark: {rounds} rounds x {seconds} s, wrk -t1 -c64, 1 proxy thread / 1 nginx worker, loopback")
print(f"req/s and p99: medians over the rounds; ratios: medians of the per-round ratios (each pair ran back to back)")
print(f"errors or non-2xx answers seen: "
      + ", ".join(f"{k} {errors(k)}" for k in runs))
widths = [max(len(str(x[i])) for x in rows + [("Measure", "waitgate", "Reference (same run)", "Ratio", "Target", "Met")]) for i in range(6)]
header = ("Measure", "waitgate", "Reference (same run)", "Ratio", "Target", "Met")
print("| " + " | ".join(h.ljust(widths[i]) for i, h in enumerate(header)) + " |")
print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
for r in rows:
    print("| " + " | ".join(str(c).ljust(widths[i]) for i, c in enumerate(r)) + " |")
EOF
