#!/usr/bin/env bash
# Builds the container image of deploy/Dockerfile and makes one request to
# the result. With podman, when it can build (the base images can be pulled
# or are present), the image itself; else the Dockerfile's build stage on
# this machine: exactly the files its COPY lines copy, into an empty
# folder, then its cargo build, then the run stage's binary with the
# image's config (deploy/waitgate.yaml, its hosts pointed at loopback).
# Run by .ci/run; `scripts/image-check.sh` alone checks the image the same way.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-tools.sh
ensure_rust
ensure_packages curl

repo=$PWD
work_and_children

# The lines of the build stage (from `FROM ... AS build` to the next FROM),
# continuation lines joined.
build_stage() {
  sed -e ':a' -e '/\\$/N; s/\\\n//; ta' deploy/Dockerfile |
    awk '/^FROM .* AS build/ {on=1; next} /^FROM / {on=0} on'
}

binary=
if command -v podman >/dev/null 2>&1; then
  echo "Building the image with podman ..."
  if podman build -f deploy/Dockerfile -t waitgate-image-check . >"$work/podman.log" 2>&1; then
    binary=podman
  else
    echo "podman could not build the image (its base images cannot be pulled here?):"
    tail -5 "$work/podman.log"
    echo "Checking the Dockerfile's build stage on this machine instead."
  fi
fi

if [ -z "$binary" ]; then
  src="$work/src"
  mkdir -p "$src"
  # Only the files a clean checkout has (tracked, or new and not ignored).
  git ls-files -co --exclude-standard >"$work/files"
  while read -r copy args; do
    [ "$copy" = COPY ] || continue
    # shellcheck disable=SC2206
    words=($args)
    dest=${words[-1]}
    for path in "${words[@]:0:${#words[@]}-1}"; do
      if [ "$dest" = ./ ] || [ "$dest" = . ]; then target="$src/$path"; else target="$src/$dest"; fi
      grep -E "^${path%/}(/|$)" "$work/files" | while read -r file; do
        rel=${file#"${path%/}"}
        mkdir -p "$(dirname "$target${rel}")"
        cp "$file" "$target${rel}"
      done
    done
  done < <(build_stage)
  echo "The build stage's files: $(cd "$src" && find . -type f | wc -l) ($(cd "$src" && ls | tr '\n' ' '))"
  # The build stage's cargo commands, as written, in that folder. Its own
  # target folder, kept between runs, so that a second check is quick.
  mkdir -p "$repo/target/image-check"
  ln -s "$repo/target/image-check" "$src/target"
  build=$(build_stage | sed -n 's/^RUN \(cargo .*\)$/\1/p')
  [ -n "$build" ] || { echo "no cargo build in the Dockerfile's build stage" >&2; exit 1; }
  echo "Running the build stage's: $build"
  (cd "$src" && eval "$build")
  binary="$src/target/release/waitgate"
fi

# The run stage: the image's config, its hosts pointed at loopback.
redis_port=$(free_port)
listen=$(free_port)
admin=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no >/dev/null &
pids+=($!)
for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
sed -e "s#redis://redis:6379#redis://127.0.0.1:$redis_port#" \
    -e "s#0.0.0.0:8080#127.0.0.1:$listen#" -e "s#0.0.0.0:9091#127.0.0.1:$admin#" \
    -e "s#address: ticketing:8080#address: 127.0.0.1:$(free_port)#" \
    deploy/waitgate.yaml >"$work/waitgate.yaml"
secret=$(head -c 32 /dev/urandom | base64)
if [ "$binary" = podman ]; then
  podman run --rm --network host -e JWT_SECRET="$secret" \
    -v "$work/waitgate.yaml:/etc/waitgate/waitgate.yaml:ro,Z" waitgate-image-check >"$work/run.log" 2>&1 &
else
  JWT_SECRET=$secret "$binary" -c "$work/waitgate.yaml" >"$work/run.log" 2>&1 &
fi
pids+=($!)
for _ in $(seq 100); do
  curl -sf "127.0.0.1:$admin/readyz" >/dev/null && break
  sleep 0.1
done
answer=$(curl -s -w ' %{http_code}' -X POST "127.0.0.1:$listen/api/v1/queue/register" \
  -H 'Content-Type: application/json' -d '{"userId":"image_check"}' || true)
case "$answer" in
  *'"status":"WAITING"'*' 200' | *'"status":"ACTIVE"'*' 200')
    echo "The image's waitgate answered a registration: $answer" ;;
  *)
    echo "The image's waitgate did not answer a registration: '$answer'" >&2
    cat "$work/run.log" >&2
    exit 1 ;;
esac
