#!/usr/bin/env bash
# Runs every test of waitgate: unit tests, the config golden tests, and the
# integration tests (each starts its own redis-server and waitgate on free
# ports; nothing touches a Redis you already run).
#
#   scripts/test.sh            # all tests
#   scripts/test.sh queue_api  # only tests whose name matches
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-tools.sh
ensure_rust
ensure_packages

cargo build --all-targets --locked
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --locked --no-fail-fast "$@"
else
  cargo test --locked --no-fail-fast "$@"
fi
