#!/usr/bin/env bash
# Runs the waitgate demo: Redis (if none answers on 127.0.0.1:6379), the demo
# upstream on 127.0.0.1:9000, and waitgate on 127.0.0.1:8080 (admin on 9091)
# with conf/waitgate.yaml. Prints commands to try; Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-tools.sh
ensure_rust
ensure_packages curl

echo "Building (the first build of Pingora takes a few minutes) ..."
cargo build --release --locked --bin waitgate --example demo_upstream

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

if redis-cli -p 6379 ping >/dev/null 2>&1; then
  echo "Using the Redis already running on 127.0.0.1:6379."
else
  echo "Starting redis-server on 127.0.0.1:6379 (nothing saved to disk) ..."
  redis-server --port 6379 --bind 127.0.0.1 --save "" --appendonly no >/dev/null &
  pids+=($!)
  for _ in $(seq 50); do redis-cli -p 6379 ping >/dev/null 2>&1 && break; sleep 0.1; done
fi

if [ -z "${JWT_SECRET:-}" ]; then
  JWT_SECRET=$(head -c 32 /dev/urandom | base64)
  export JWT_SECRET
  echo "JWT_SECRET was not set: using a random one for this demo."
fi
# The admin API (docs/ticket-open.md) exists only with a token.
export WAITGATE_ADMIN_TOKEN=${WAITGATE_ADMIN_TOKEN:-demo-admin-token-change-me}

"$RELEASE"/examples/demo_upstream 127.0.0.1:9000 2>/dev/null &
pids+=($!)
RUST_LOG=${RUST_LOG:-warn,waitgate=info} "$RELEASE"/waitgate -c conf/waitgate.yaml &
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

  # join the queue: note the queueCredential in the answer (it is given once)
  curl -s -X POST 127.0.0.1:8080/api/v1/queue/register \
       -H 'Content-Type: application/json' -d '{"userId":"user_10"}'; echo

  # your place (polling this is your heartbeat)
  curl -s '127.0.0.1:8080/api/v1/queue/rank?userId=user_10'; echo

  # once the answer says "ACTIVE", trade the credential for a token
  curl -s -X POST 127.0.0.1:8080/api/v1/queue/active/token \
       -H 'Content-Type: application/json' \
       -d '{"userId":"user_10","queueCredential":"<credential>"}'; echo

  # the protected backend, with that token
  curl -s 127.0.0.1:8080/api/v1/follow-up/access -H 'Authorization: Bearer <accessToken>'; echo

  # leave the queue
  curl -s -i -X DELETE '127.0.0.1:8080/api/v1/queue/dropout?userId=user_10' \
       -H 'X-Queue-Credential: <credential>'

  # health and readiness
  curl -s 127.0.0.1:9091/healthz; echo; curl -s 127.0.0.1:9091/readyz; echo

  # the admin API (docs/ticket-open.md): the queue's state, then pause and resume admission
  curl -s 127.0.0.1:9091/admin/v1/queues/baseball -H 'Authorization: Bearer demo-admin-token-change-me'; echo
  curl -s -X POST 127.0.0.1:9091/admin/v1/queues/baseball/pause -H 'Authorization: Bearer demo-admin-token-change-me'; echo
  curl -s -X POST 127.0.0.1:9091/admin/v1/queues/baseball/resume -H 'Authorization: Bearer demo-admin-token-change-me'; echo

Press Ctrl-C to stop the demo.
TRY
wait
