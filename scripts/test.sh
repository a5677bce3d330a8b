#!/usr/bin/env bash
# Runs every test of waitgate: unit tests, the config golden tests, and the
# integration tests (each starts its own redis-server and waitgate on free
# ports; nothing touches a Redis you already run). The suites about the
# edge (edge, direct, faults, hostile, integrity, operations, reload, pools,
# control, browser, slow_clients, upstream_metrics, close, limits) then run a second time
# with the direct lane off (`direct-lane: false`), so that every behaviour
# they check is checked on both HTTP paths; tests/differential.rs compares
# the two paths request by request.
#
#   scripts/test.sh            # all tests
#   scripts/test.sh queue_api  # only tests whose name matches
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-tools.sh
ensure_rust
# haproxy: the readiness test behind a load balancer; promtool and
# systemd-analyze: the deployment checks (tests/deploy.rs); chromium: the
# browser tests (tests/chromium.rs).
ensure_packages haproxy promtool systemd-analyze openssl curl chromium
ensure_python_tools

cargo build --all-targets --locked
edge_suites=(--test edge --test direct --test faults --test hostile --test integrity --test operations --test reload --test pools --test control --test browser --test slow_clients --test upstream_metrics --test close --test limits)
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --locked --no-fail-fast "$@"
  echo "The edge suites again, with the direct lane off:" >&2
  WAITGATE_TEST_DIRECT_LANE=off cargo nextest run --locked --no-fail-fast "${edge_suites[@]}" "$@"
else
  cargo test --locked --no-fail-fast "$@"
  echo "The edge suites again, with the direct lane off:" >&2
  WAITGATE_TEST_DIRECT_LANE=off cargo test --locked --no-fail-fast "${edge_suites[@]}" "$@"
fi
