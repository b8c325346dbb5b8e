# podresources-exporter container image, reproducible: `make image` builds it with
# whichever of podman, buildah or docker is there (docs/operations.md).
#
# - The base is pinned by digest and is an argument: where Docker Hub cannot be reached,
#   build FROM a Python 3.11+ image you have (`make base-image` makes one from Debian
#   packages): BASE_IMAGE=localhost/debian-python:bookworm make image
# - Every dependency comes from requirements.lock, pinned with hashes, as wheels
#   (--only-binary: nothing is compiled); the build backend from requirements-build.lock.
# - A private index, its credentials or a TLS-inspecting proxy's CA go in build secrets:
#     buildah build --secret id=pip.conf,src=$HOME/.config/pip/pip.conf \
#                   --secret id=ca.crt,src=/etc/ssl/certs/ca-certificates.crt .
#   (a pip.conf saying `cert = /run/secrets/ca.crt` uses the second). They are mounted
#   for the download step only: in no layer and in no history entry.
# - The runtime stage gets a virtual environment without pip, and the base's pip,
#   setuptools, wheel and ensurepip are removed: nothing in the image can install code.
ARG BASE_IMAGE=docker.io/library/python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d

# ---- builder: download the locked wheels, build ours, install into a venv --------------
FROM ${BASE_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY requirements.lock requirements-build.lock ./
RUN --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca.crt \
    python3 -m venv /build \
    && /build/bin/pip download --require-hashes --only-binary=:all: \
       --dest /wheels -r requirements.lock \
    && /build/bin/pip download --require-hashes --only-binary=:all: \
       --dest /build-wheels -r requirements-build.lock
COPY pyproject.toml README.md ./
COPY exporter/ ./exporter/
# With SOURCE_DATE_EPOCH set, wheels get fixed timestamps and the .pyc files pip writes
# are hash-checked rather than stamped with the install time: a rebuild is bit-identical.
ARG SOURCE_DATE_EPOCH=0
# From here on nothing is fetched: --no-index everywhere.
RUN /build/bin/pip install --no-index --find-links /build-wheels --require-hashes \
       -r requirements-build.lock \
    && /build/bin/pip wheel --no-index --no-deps --no-build-isolation --wheel-dir /wheels . \
    && python3 -m venv --without-pip /opt/podresources-exporter \
    && /build/bin/pip --python /opt/podresources-exporter/bin/python install --no-index \
       --find-links /wheels --require-hashes -r requirements.lock \
    && /build/bin/pip --python /opt/podresources-exporter/bin/python install --no-index \
       --no-deps /wheels/podresources_exporter-*.whl \
    && /opt/podresources-exporter/bin/podresources-exporter --help > /dev/null

# ---- runtime: the venv, and nothing that installs software ------------------------------
FROM ${BASE_IMAGE}
# Re-declared: an ARG before the first FROM is not visible inside a stage.
ARG BASE_IMAGE
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
ENV PATH=/opt/podresources-exporter/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The python:*-slim base keeps pip, setuptools and wheel in /usr/local; a Debian-built
# base in /usr/lib/python3 and /usr/share/python-wheels. Remove them wherever they are.
RUN rm -rf /usr/local/bin/pip* /usr/bin/pip* /usr/share/python-wheels \
      /usr/local/lib/python3*/ensurepip /usr/lib/python3*/ensurepip \
      /usr/local/lib/python3*/site-packages/pip /usr/local/lib/python3*/site-packages/pip-* \
      /usr/local/lib/python3*/site-packages/setuptools /usr/local/lib/python3*/site-packages/setuptools-* \
      /usr/local/lib/python3*/site-packages/wheel /usr/local/lib/python3*/site-packages/wheel-* \
      /usr/local/lib/python3*/site-packages/pkg_resources /usr/local/lib/python3*/site-packages/_distutils_hack \
      /usr/local/lib/python3*/site-packages/distutils-precedence.pth \
      /usr/lib/python3/dist-packages/pip /usr/lib/python3/dist-packages/pip-* \
      /usr/lib/python3/dist-packages/setuptools /usr/lib/python3/dist-packages/setuptools-* \
      /usr/lib/python3/dist-packages/wheel /usr/lib/python3/dist-packages/wheel-* \
      /usr/lib/python3/dist-packages/pkg_resources /usr/lib/python3/dist-packages/_distutils_hack \
      /usr/lib/python3/dist-packages/distutils-precedence.pth
COPY --from=builder /opt/podresources-exporter /opt/podresources-exporter
# Unprivileged by default (enough for --demo). The DaemonSet runs it as root only because
# the kubelet's pod-resources socket is root-owned: see manifests/base/daemonset.yaml.
USER 65534:65534
EXPOSE 9410
# No HEALTHCHECK: Kubernetes probes /healthz and /readyz (manifests/base/daemonset.yaml).
ENTRYPOINT ["podresources-exporter"]
