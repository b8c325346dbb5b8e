#!/usr/bin/env bash
# Build the container image with whichever engine this machine has: podman, buildah, or
# docker with a reachable daemon (in that order). Reproducible: timestamps are the last
# commit's time and nothing comes from a build cache (a cached step keeps the time of the
# build that made it), so the same commit and base give a bit-identical image.
#
#   IMAGE       tag to build          (default localhost/podresources-exporter:<version>)
#   BASE_IMAGE  Python 3.11+ base     (default: the Dockerfile's digest-pinned python:slim)
#   PIP_CONF    a pip.conf to use while downloading wheels (index, credentials): a build
#               secret, never in the image
#   PIP_CERT    a CA bundle pip must trust (a TLS-inspecting proxy): a build secret too
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml)
image=${IMAGE:-localhost/podresources-exporter:$version}
epoch=$(git log -1 --format=%ct 2>/dev/null || echo 0)

engine=""
if command -v podman >/dev/null 2>&1; then
  engine=podman
elif command -v buildah >/dev/null 2>&1; then
  engine=buildah
elif command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  engine=docker
fi
if [ -z "$engine" ]; then
  echo "no container engine: install buildah (apt-get install buildah) or podman, or start Docker" >&2
  exit 1
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
args=(--build-arg "SOURCE_DATE_EPOCH=$epoch" --build-arg "VERSION=$version"
      --build-arg "REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)"
      --build-arg "CREATED=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)")
[ -n "${BASE_IMAGE:-}" ] && args+=(--build-arg "BASE_IMAGE=$BASE_IMAGE")
if [ -n "${PIP_CONF:-}" ]; then
  args+=(--secret "id=pip.conf,src=$PIP_CONF")
elif [ -n "${PIP_CERT:-}" ]; then
  printf '[global]\ncert = /run/secrets/ca.crt\n' > "$scratch/pip.conf"
  args+=(--secret "id=pip.conf,src=$scratch/pip.conf")
fi
[ -n "${PIP_CERT:-}" ] && args+=(--secret "id=ca.crt,src=$PIP_CERT")

case $engine in
  buildah) set -x; buildah build --isolation chroot --layers=false --timestamp "$epoch" "${args[@]}" -t "$image" . ;;
  podman)  set -x; podman build --layers=false --timestamp "$epoch" "${args[@]}" -t "$image" . ;;
  docker)  set -x; DOCKER_BUILDKIT=1 docker build --no-cache "${args[@]}" -t "$image" . ;;
esac
