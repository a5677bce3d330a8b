#!/usr/bin/env bash
# Fuzzes the parsers that face clients, with libFuzzer via cargo-fuzz:
#   path  the path classifier and absolute-form cut
#   jwt   the Authorization header and JWT claim checks
#   body  the queue API's JSON bodies and query strings
#   upstream  upstream bytes: the direct lane's response-head reading and
#         chunked-body scanner
# Each target asserts no panic plus its own properties, starting from the
# seed corpus in fuzz/corpus/<target> (new finds go to a scratch copy).
#
#   scripts/fuzz.sh            # 20 s per target (what CI runs)
#   scripts/fuzz.sh 3600       # an hour per target
#   scripts/fuzz.sh 600 jwt    # one target
#
# cargo-fuzz needs nightly-only compiler flags; RUSTC_BOOTSTRAP=1 lets the
# stable toolchain accept them. The first build instruments every
# dependency and takes several minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-tools.sh
ensure_rust
ensure_packages c++ # libFuzzer is C++

seconds=${1:-20}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(path jwt body upstream browser)

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "Installing cargo-fuzz ..." >&2
  cargo install cargo-fuzz --locked
fi
export RUSTC_BOOTSTRAP=1
cargo fuzz build --fuzz-dir fuzz

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for target in "${targets[@]}"; do
  mkdir -p "$scratch/$target"
  rm -rf "fuzz/artifacts/$target"
  echo "fuzzing $target for ${seconds}s ..."
  cargo fuzz run --fuzz-dir fuzz "$target" "$scratch/$target" "fuzz/corpus/$target" -- \
    -max_total_time="$seconds" -print_final_stats=1 2>&1 | grep -E "^Done|stat::number_of_executed_units|ERROR|panicked" || true
  # A failure leaves its input in fuzz/artifacts/<target>/ (libFuzzer's own file names).
  # shellcheck disable=SC2010
  if ls fuzz/artifacts/"$target"/ 2>/dev/null | grep -qE '^(crash|timeout|oom|leak)-'; then
    echo "fuzz target $target failed: see fuzz/artifacts/$target/" >&2
    exit 1
  fi
done
