#!/bin/bash
# RSS per idle keep-alive connection: waitgate with N connections open, each
# after one request (a protected route answered 401), held.
#
#   scripts/idle-memory.sh [BINARY] [N]      # default target/release/waitgate, 10000
#
# Needs redis-server, curl and python3, and an open-file limit above N (the
# hard limit is taken). Prints RSS before and after, and (after - before) / N.
set -euo pipefail
BIN=${1:-target/release/waitgate}; N=${2:-10000}
PORT=${IDLE_PORT:-18080}; ADMIN=${IDLE_ADMIN_PORT:-19091}; REDIS=${IDLE_REDIS_PORT:-6390}
ulimit -n "$(ulimit -Hn)"
work=$(mktemp -d)
# A Redis of the run before may still be going away from the same port.
for _ in $(seq 50); do redis-cli -p "$REDIS" ping >/dev/null 2>&1 || break; sleep 0.1; done
redis-server --port "$REDIS" --save '' --daemonize yes --pidfile "$work/redis.pid" >/dev/null
for _ in $(seq 50); do [ -s "$work/redis.pid" ] && break; sleep 0.1; done
cat > "$work/wg.yaml" <<YAML
listen: 127.0.0.1:$PORT
admin-listen: 127.0.0.1:$ADMIN
threads: 2
max-connections: $((N + 1000))
client-header-timeout-ms: 60000
redis: {url: 'redis://127.0.0.1:$REDIS/0'}
queues: {baseball: {}}
upstreams: {ticketing: {addresses: ['127.0.0.1:9']}}
routes: [{prefix: /tickets, upstream: ticketing, queue: baseball}]
log: {access: false}
YAML
JWT_SECRET=$(head -c 32 /dev/urandom | base64) "$BIN" -c "$work/wg.yaml" > "$work/wg.log" 2>&1 &
wg=$!
trap 'kill $wg 2>/dev/null; kill "$(cat "$work/redis.pid")" 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do curl -s "127.0.0.1:$ADMIN/healthz" >/dev/null && break; sleep 0.1; done
curl -s -o /dev/null "127.0.0.1:$PORT/tickets/seat"
sleep 1
rss() { awk '/VmRSS/ {print $2}' "/proc/$wg/status"; }
before=$(rss)
python3 - "$N" "$PORT" "$work/held" <<'PY' &
import socket, sys, time
n, port, flag = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
held = []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /tickets/seat HTTP/1.1\r\nHost: x\r\n\r\n")
    held.append(s)
for s in held:
    s.recv(65536)
open(flag, "w").write("held")
time.sleep(60)
PY
holder=$!
for _ in $(seq 600); do [ -f "$work/held" ] && break; sleep 0.1; done
sleep 2
after=$(rss)
kill $holder 2>/dev/null || true
echo "waitgate: RSS ${before} KiB before, ${after} KiB with $N idle connections: $(( (after - before) * 1024 / N )) bytes each"
