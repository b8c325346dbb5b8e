#!/usr/bin/env bash
# A Python 3.11 base image made from Debian bookworm's packages, for machines that reach
# Debian's archive but no container registry: BASE_IMAGE=localhost/debian-python:bookworm
# make image. Needs root, mmdebstrap and buildah (apt-get install mmdebstrap buildah).
set -euo pipefail
name=${1:-localhost/debian-python:bookworm}
if buildah inspect --type image "$name" >/dev/null 2>&1; then
  echo "$name exists"; exit 0
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
  bookworm "$scratch/rootfs.tar"
container=$(buildah from scratch)
buildah add --quiet "$container" "$scratch/rootfs.tar" /
buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$container"
buildah commit --quiet "$container" "$name"
buildah rm "$container" >/dev/null
echo "$name built"
