#!/usr/bin/env bash
# Runs the waitgate demo: its own Redis on a free port (nothing saved to
# disk; WAITGATE_DEMO_REDIS=redis://host:port/db uses that one instead), the
# demo upstream on 127.0.0.1:9000, and waitgate on 127.0.0.1:8080 (admin on
# 9091) with conf/waitgate.yaml. Prints commands to try; Ctrl-C stops
# everything. It never writes into a Redis it did not start unless told to.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-tools.sh
ensure_rust
ensure_packages curl

echo "Building (the first build of Pingora takes a few minutes) ..."
cargo build --release --locked --features demo --bin waitgate --bin waitgate-demo-upstream

for port in 8080 9091 9000; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "Port $port is already in use; stop what listens there and run this again." >&2
    exit 1
  fi
done

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

config=$(mktemp -d)
trap 'cleanup; rm -rf "$config"' EXIT INT TERM
if [ -n "${WAITGATE_DEMO_REDIS:-}" ]; then
  redis_url=$WAITGATE_DEMO_REDIS
  echo "Using the Redis you named: $redis_url (the demo writes its queue there)."
else
  port=
  for candidate in $(seq 6380 6480); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then port=$candidate; break; fi
  done
  [ -n "$port" ] || { echo "No free port in 6380-6480 for the demo's Redis." >&2; exit 1; }
  echo "Starting the demo's own redis-server on 127.0.0.1:$port (nothing saved to disk) ..."
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no >/dev/null &
  pids+=($!)
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis_url=redis://127.0.0.1:$port/0
fi
sed "s#url: redis://127.0.0.1:6379/0#url: $redis_url#" conf/waitgate.yaml >"$config/waitgate.yaml"

if [ -z "${JWT_SECRET:-}" ]; then
  JWT_SECRET=$(head -c 32 /dev/urandom | base64)
  export JWT_SECRET
  echo "JWT_SECRET was not set: using a random one for this demo."
fi
# The admin API (docs/ticket-open.md) exists only with a token.
export WAITGATE_ADMIN_TOKEN=${WAITGATE_ADMIN_TOKEN:-demo-admin-token-change-me}

"$RELEASE"/waitgate-demo-upstream 127.0.0.1:9000 2>/dev/null &
pids+=($!)
RUST_LOG=${RUST_LOG:-warn,waitgate=info} "$RELEASE"/waitgate -c "$config/waitgate.yaml" &
pids+=($!)
started=
for _ in $(seq 100); do
  curl -sf 127.0.0.1:9091/healthz >/dev/null && { started=1; break; }
  sleep 0.1
done
if [ -z "$started" ]; then
  echo "waitgate did not answer on 127.0.0.1:9091/healthz within 10 s; its messages are above." >&2
  exit 1
fi

cat <<'TRY'

waitgate is running on http://127.0.0.1:8080 (admin on http://127.0.0.1:9091).

In a browser, open http://127.0.0.1:8080/tickets/seat : you land on the
waiting room, wait your turn (a few seconds when nobody is ahead), and arrive
at the ticket page. Pause admission (below) to watch the page say so.

Or try, in another terminal:

  # join the queue; the queueCredential is given once: keep it in CRED
  CRED=$(curl -s -X POST 127.0.0.1:8080/api/v1/queue/register \
       -H 'Content-Type: application/json' -d '{"userId":"user_10"}' |
       sed -n 's/.*"queueCredential":"\([^"]*\)".*/\1/p'); echo "$CRED"

  # your place (polling this is your heartbeat), then poll until admitted
  curl -s '127.0.0.1:8080/api/v1/queue/rank?userId=user_10'; echo
  until curl -s '127.0.0.1:8080/api/v1/queue/rank?userId=user_10' | grep -q '"ACTIVE"'; do sleep 1; done

  # once the answer says "ACTIVE", trade the credential for a token
  TOKEN=$(curl -s -X POST 127.0.0.1:8080/api/v1/queue/active/token \
       -H 'Content-Type: application/json' \
       -d "{\"userId\":\"user_10\",\"queueCredential\":\"$CRED\"}" |
       sed -n 's/.*"accessToken":"\([^"]*\)".*/\1/p'); echo "$TOKEN"

  # the protected backend, with that token
  curl -s 127.0.0.1:8080/api/v1/follow-up/access -H "Authorization: Bearer $TOKEN"; echo

  # leave the queue
  curl -s -i -X DELETE '127.0.0.1:8080/api/v1/queue/dropout?userId=user_10' \
       -H "X-Queue-Credential: $CRED"

  # health and readiness
  curl -s 127.0.0.1:9091/healthz; echo; curl -s 127.0.0.1:9091/readyz; echo

  # the admin API (docs/ticket-open.md): the queue's state, then pause and resume admission
  curl -s 127.0.0.1:9091/admin/v1/queues/baseball -H 'Authorization: Bearer demo-admin-token-change-me'; echo
  curl -s -X POST 127.0.0.1:9091/admin/v1/queues/baseball/pause -H 'Authorization: Bearer demo-admin-token-change-me'; echo
  curl -s -X POST 127.0.0.1:9091/admin/v1/queues/baseball/resume -H 'Authorization: Bearer demo-admin-token-change-me'; echo

Press Ctrl-C to stop the demo.
TRY
wait
