#!/usr/bin/env bash
# One queue over three Redis servers on loopback, as docs/scale.md designs
# it for a Redis Cluster: 3,000,000 users, admission of the global head
# raced by three instances, checked for first come, first served, the
# global rate and nobody admitted twice (examples/shards.rs).
#
#   scripts/shards.sh            # 3,000,000 users
#   scripts/shards.sh 300000     # fewer
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-tools.sh
ensure_rust
users=${1:-3000000}
cargo build --release --locked --example shards >&2
work=$(mktemp -d)
ports=(19301 19302 19303)
cleanup() {
  for p in "${ports[@]}"; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
for p in "${ports[@]}"; do
  redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" --daemonize yes \
    --logfile "$work/redis-$p.log"
done
for p in "${ports[@]}"; do
  for _ in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
"$RELEASE"/examples/shards "$users" "${ports[@]/#/127.0.0.1:}"
