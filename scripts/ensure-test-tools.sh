#!/usr/bin/env bash
# Make sure the outside programs the test suite drives for real are installed:
# Prometheus and promtool (Debian package "prometheus"), a C compiler (the fake NVML
# library), and buildah with mmdebstrap (tests/ship/test_image.py builds the image; where
# no registry serves the pinned base, a base is made once from Debian's packages).
# Installs with apt-get when run as root on Debian/Ubuntu; otherwise says what is
# missing, and the tests that need it skip with that reason.
set -u
missing=()

# The image test needs a base in local storage: the Dockerfile's pinned one if a registry
# serves it, else one made from Debian packages (a few minutes, once per machine).
ensure_base_image() {
  command -v buildah >/dev/null 2>&1 && [ "$(id -u)" = 0 ] || return 0
  base=$(sed -n 's/^ARG BASE_IMAGE=//p' Dockerfile)
  buildah inspect --type image "$base" >/dev/null 2>&1 && return 0
  buildah inspect --type image localhost/debian-python:bookworm >/dev/null 2>&1 && return 0
  timeout 120 buildah pull --quiet "$base" >/dev/null 2>&1 && return 0
  command -v mmdebstrap >/dev/null 2>&1 || return 0
  echo "building a local Python base image for the image test (scripts/build-base-image.sh)"
  bash scripts/build-base-image.sh >/dev/null 2>&1 \
    || echo "warning: no base image; tests/ship/test_image.py will skip"
}
command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
# A compiler that can build against the C library: Debian's gcc only recommends its
# headers (libc6-dev), and apt-get below installs no recommends.
c_builds() {
  printf '#include <stdio.h>\nint main(void) { return 0; }\n' \
    | gcc -x c -o /dev/null - >/dev/null 2>&1
}
command -v gcc >/dev/null 2>&1 && c_builds || missing+=(gcc libc6-dev)
command -v buildah >/dev/null 2>&1 || command -v podman >/dev/null 2>&1 || missing+=(buildah)
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
if [ ${#missing[@]} -eq 0 ]; then
  ensure_base_image
  exit 0
fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing test tools: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || echo "warning: apt-get install ${missing[*]} failed; tests that need them will skip"
  ensure_base_image
else
  echo "note: not installed: ${missing[*]} (apt-get install ${missing[*]}); tests that need them will skip"
fi
exit 0
