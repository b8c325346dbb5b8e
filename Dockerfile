# podresources-exporter container image. Needs BuildKit (the default since Docker 23) for
# RUN --mount; no `# syntax=` line, so the built-in frontend is used and nothing is pulled
# besides the base image.
#
#   docker build -t podresources-exporter:dev .
#
# Where no registry is reachable, build FROM a Python 3.11+ image you already have
# (and point pip at a mirror for the runtime dependencies):
#
#   docker build --build-arg BASE_IMAGE=registry.local/python:3.11-slim \
#                --build-arg PIP_INDEX_URL=https://pypi.mirror.local/simple .
#
# Pin BASE_IMAGE by digest (python:3.11.14-slim-bookworm@sha256:...) in release builds.
ARG BASE_IMAGE=python:3.11.14-slim-bookworm

# ---- builder: turn the source tree into one wheel --------------------------------------
FROM ${BASE_IMAGE} AS builder
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# Only what the wheel is made of (see .dockerignore): a change to tests or docs does not
# invalidate this layer.
COPY pyproject.toml README.md ./
COPY exporter/ ./exporter/
RUN pip wheel --no-deps --wheel-dir /wheels .

# ---- runtime: the wheel and its dependencies, nothing else --------------------------------
FROM ${BASE_IMAGE}
# Re-declared: an ARG before the first FROM is not visible inside a stage.
ARG BASE_IMAGE
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="podresources-exporter" \
      org.opencontainers.image.description="Prometheus exporter joining kubelet PodResources allocations with GPU, NIC, RDMA, CPU and NUMA telemetry" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The wheel comes in through a bind mount, so it is not left in any layer; pip installs
# prebuilt wheels of the dependencies (no compiler in this image) and keeps no cache.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-cache-dir /wheels/podresources_exporter-*.whl \
    && podresources-exporter --help > /dev/null
# Unprivileged by default (enough for --demo). The DaemonSet runs it as root only because
# the kubelet's pod-resources socket is root-owned: see manifests/base/daemonset.yaml.
USER 65534:65534
EXPOSE 9410
# No HEALTHCHECK: Kubernetes probes /healthz and /readyz (manifests/base/daemonset.yaml).
ENTRYPOINT ["podresources-exporter"]
