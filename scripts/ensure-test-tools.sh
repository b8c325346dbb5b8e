#!/usr/bin/env bash
# Make sure the outside programs the test suite drives for real are installed:
# Prometheus and promtool (Debian package "prometheus") and a C compiler (the fake NVML
# library). Installs with apt-get when run as root on Debian/Ubuntu; otherwise says what
# is missing, and the tests that need it skip with that reason.
set -u
missing=()
command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing test tools: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || echo "warning: apt-get install ${missing[*]} failed; tests that need them will skip"
else
  echo "note: not installed: ${missing[*]} (apt-get install ${missing[*]}); tests that need them will skip"
fi
exit 0
