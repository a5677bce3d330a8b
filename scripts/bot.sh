#!/usr/bin/env bash
# A registration bot against waitgate, measured with and without each
# defence (docs/security.md, "A measured attack"). For each case it starts
# its own redis-server and a release waitgate on free ports, behind a
# pretend balancer (trusted-proxies: the bot and the visitors are told apart
# by X-Forwarded-For, as behind a real one), and for BOT_DURATION seconds
# (default 20) runs:
#   - the bot: wrk, 16 connections, one new made-up userId a request, all
#     from one address (examples/bot/register-flood.lua);
#   - a real visitor every 0.5 s, each from an address of its own, who
#     registers once and records how long the place took.
# Against a queue that asks a proof of work, the bot is either the same
# flood (which cannot answer a challenge) or examples/proof_bot.rs, which
# solves each challenge in native code on every core as fast as it can;
# and each visitor is the JS client in Node (examples/js/waitgate-client.js:
# Web Crypto, the same code and API the waiting-room page uses), whose
# time to a place includes solving the challenge.
# It prints, per case: the places the bot got per minute, the Redis time
# (INFO commandstats, every command of the run) in all and per bot place,
# and what the visitors saw.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-tools.sh
ensure_rust
ensure_packages wrk curl python3 node

DURATION=${BOT_DURATION:-20}
cargo build --release --locked --bin waitgate --example proof_bot >&2
# BOT_BINARY: another waitgate to measure (an earlier build, say).
BIN=${BOT_BINARY:-$RELEASE/waitgate}
SOLVER=$RELEASE/examples/proof_bot
work_and_children

LOGIN_SECRET=the-bot-runs-login-secret-at-least-32-bytes
# An HS256 login token of the site's for `sub`, valid for an hour.
login_for() {
  python3 - "$1" "$LOGIN_SECRET" <<'PY'
import base64, hashlib, hmac, json, sys, time
b = lambda d: base64.urlsafe_b64encode(d).rstrip(b"=").decode()
head = b(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
body = b(json.dumps({"sub": sys.argv[1], "iss": "shop", "aud": "waitgate",
                     "exp": int(time.time()) + 3600}).encode())
sig = hmac.new(sys.argv[2].encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
print(f"{head}.{body}.{b(sig)}")
PY
}

# A visitor with the JS client: registers (solving the queue's challenge)
# from its own address; prints the status and the seconds it took.
cat >"$work/visitor.js" <<'JS'
const [client, base, user, address] = process.argv.slice(2);
const WaitgateClient = require(client);
const plain = globalThis.fetch;
globalThis.fetch = (url, init = {}) =>
  plain(url, { ...init, headers: { ...init.headers, "X-Forwarded-For": address } });
const started = Date.now();
new WaitgateClient({ base, queue: "baseball", userId: user }).register({ prove: true })
  .then(() => console.log(`200 ${(Date.now() - started) / 1000}`))
  .catch((e) => console.log(`${e.status || 0} ${(Date.now() - started) / 1000}`));
JS

# run_one NAME EXTRA_YAML [QUEUE_YAML] [BOT]: BOT is `flood` (the default)
# or `solver`.
run_one() {
  local name=$1 extra=$2 queue=${3:-} bot=${4:-flood}
  local rport listen admin
  rport=$(free_port); listen=$(free_port); admin=$(free_port)
  redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no >/dev/null &
  pids+=($!)
  for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
  cat >"$work/$name.yaml" <<YAML
listen: 127.0.0.1:$listen
admin-listen: 127.0.0.1:$admin
trusted-proxies: [127.0.0.1]
log: {access: false}
redis: {url: 'redis://127.0.0.1:$rport/0'}
queues:
  baseball:
    # Nobody is admitted during the run: every place taken stays counted.
    admission: {interval-ms: 3600000, batch-size: 1}
    $queue
upstreams: {ticketing: {address: '127.0.0.1:9'}}
routes: []
$extra
YAML
  JWT_SECRET=$(head -c 32 /dev/urandom | base64) SHOP_LOGIN_SECRET=$LOGIN_SECRET RUST_LOG=warn \
    "$BIN" -c "$work/$name.yaml" 2>"$work/$name.log" &
  pids+=($!)
  for _ in $(seq 100); do curl -sf "127.0.0.1:$admin/healthz" >/dev/null && break; sleep 0.1; done
  redis-cli -p "$rport" CONFIG RESETSTAT >/dev/null

  # The visitors: one every 0.5 s, each its own address and user.
  (
    i=0
    while :; do
      i=$((i + 1))
      if [ -n "$queue" ]; then
        # One after the other, 0.5 s apart: each solves on one core, as
        # on a visitor's own device (here it shares the machine's two
        # cores with the bot, waitgate and Redis; visitors solving at
        # once would measure their own load instead).
        node "$work/visitor.js" "$PWD/examples/js/waitgate-client.js" "http://127.0.0.1:$listen" \
          "visitor-$i" "10.1.$((i / 250)).$((i % 250 + 1))" >>"$work/$name.visitors" || true
        sleep 0.5
        continue
      elif [ "$name" = identity ]; then
        auth=(-H "Authorization: Bearer $(login_for "visitor-$i")"); body='{}'
      else
        auth=(); body="{\"userId\":\"visitor-$i\"}"
      fi
      curl -s -o /dev/null -w '%{http_code} %{time_total}\n' -X POST \
        "127.0.0.1:$listen/api/v1/queue/register" -H 'Content-Type: application/json' \
        -H "X-Forwarded-For: 10.1.$((i / 250)).$((i % 250 + 1))" "${auth[@]}" -d "$body" \
        >>"$work/$name.visitors" || true
      sleep 0.5
    done
  ) &
  local visitors=$!
  local requests
  if [ "$bot" = solver ]; then
    "$SOLVER" --target "127.0.0.1:$listen" --threads "$(nproc)" --seconds "$DURATION" \
      --address 10.6.6.6 >"$work/$name.wrk" 2>&1
    # A challenge and a register per try.
    requests=$(sed -n 's/^places=\([0-9]*\) refused=\([0-9]*\).*/\1 \2/p' "$work/$name.wrk" |
      awk '{print 2 * ($1 + $2)}')
    sed -n 's/^places=\([0-9]*\) refused=\([0-9]*\) hashes=\([0-9]*\).*/bot status solver: \1 placed, \2 refused, \3 hashes/p' \
      "$work/$name.wrk" >>"$work/$name.wrk"
  else
    BOT_ADDRESS=10.6.6.6 wrk -t1 -c16 -d"${DURATION}s" -s examples/bot/register-flood.lua \
      "http://127.0.0.1:$listen" >"$work/$name.wrk" 2>&1
    requests=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' "$work/$name.wrk")
  fi
  kill "$visitors" 2>/dev/null || true
  wait "$visitors" 2>/dev/null || true
  if [ -n "$queue" ]; then
    # The visitors still solving: 15 s to finish, then they are counted as
    # not placed.
    for _ in $(seq 150); do pgrep -f "$work/visitor.js" >/dev/null || break; sleep 0.1; done
    pkill -f "$work/visitor.js" 2>/dev/null || true
  fi

  local bot_places redis_us
  bot_places=$(redis-cli -p "$rport" ZRANGE 'queue:{baseball}:waiting' 0 -1 | grep -c '^bot-' || true)
  redis_us=$(redis-cli -p "$rport" INFO commandstats |
    sed -n 's/.*usec=\([0-9]*\),.*/\1/p' | awk '{s += $1} END {print s + 0}')
  python3 - "$name" "$DURATION" "$bot_places" "$redis_us" "${requests:-0}" "$work/$name.visitors" \
    "$(grep '^bot status' "$work/$name.wrk" | tr '\n' ';')" <<'PY'
import statistics, sys
name, duration, places, redis_us, requests, visitors, statuses = sys.argv[1:]
duration, places, redis_us, requests = int(duration), int(places), int(redis_us), int(requests)
seen = [line.split() for line in open(visitors) if line.strip()]
ok = [float(t) * 1000 for code, t in seen if code == "200"]
per_place = f"{redis_us / places:.1f}" if places else "-"
median = f"{statistics.median(ok):.1f}" if ok else "-"
worst = f"{max(ok):.1f}" if ok else "-"
print(f"| {name} | {requests / duration:,.0f} | {places * 60 / duration:,.0f} | "
      f"{redis_us / 1000:,.0f} ms ({redis_us / duration / 10000:.1f}% of a core) | {per_place} | "
      f"{len(ok)} of {len(seen)} | {median} / {worst} ms | {statuses.rstrip(';')} |")
PY
}

echo "Bot for ${DURATION} s per case, 16 connections from one address; a visitor every 0.5 s."
echo
echo "| defence | bot requests/s | bot places per minute | Redis time (all commands) | Redis µs per bot place | visitors placed | visitor's time to a place, median / max | bot answers |"
echo "|---|---|---|---|---|---|---|---|"
# BOT_CASES: the cases to run (names, space-separated); all by default.
want() { [ -z "${BOT_CASES:-}" ] || [[ " $BOT_CASES " == *" $1 "* ]]; }
run_case() { if want "$1"; then run_one "$@"; fi; }
run_case none ""
run_case limits "limits: {register-per-client: {per-second: 1, burst: 20}}"
run_case identity "identity: {issuer: shop, audience: waitgate, secret-env: SHOP_LOGIN_SECRET}"
run_case challenge "" "challenge: {}"
run_case challenge-solver "" "challenge: {}" solver
run_case challenge-solver-limits "limits: {register-per-client: {per-second: 1, burst: 20}}" \
  "challenge: {}" solver
