"""The built image: `make image`'s script on a real engine, then its history and layers.

Runs where buildah or podman is installed (scripts/ensure-test-tools.sh installs buildah)
and a base image is in local storage: the Dockerfile's pinned python:slim, or
localhost/debian-python:bookworm from scripts/build-base-image.sh where no registry can
be reached. The build reaches the package index, as any image build does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# One worker of `make unit` runs them all: the image, built once under one tag.
pytestmark = pytest.mark.xdist_group("image")

IMAGE = "localhost/podresources-exporter:test"
LOCAL_BASE = "localhost/debian-python:bookworm"
MARKER = "SEKRET-" + os.urandom(6).hex()  # in the build secret; must be nowhere in the image
# Empty files an engine leaves where it bind-mounts during RUN, when the base lacks them.
MOUNT_POINTS = {"etc/hosts", "etc/hostname", "etc/resolv.conf"}
# What installs software, by the names Python finds it under.
INSTALLERS = re.compile(
    r"/(site|dist)-packages/(pip|setuptools|wheel|pkg_resources|_distutils_hack)(-[^/]*)?$"
    r"|/ensurepip$|\.whl$|/bin/pip[0-9.]*$"
)


def _engine() -> str:
    for name in ("buildah", "podman"):
        if shutil.which(name):
            return name
    pytest.skip("no container engine: apt-get install buildah (scripts/ensure-test-tools.sh)")


def _has_image(engine: str, name: str) -> bool:
    inspect = [engine, "image", "exists", name] if engine == "podman" else None
    command = inspect or [engine, "inspect", "--type", "image", name]
    return subprocess.run(command, capture_output=True, check=False).returncode == 0


def _default_base() -> str:
    text = (REPO / "Dockerfile").read_text()
    match = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.MULTILINE)
    assert match is not None
    return match.group(1)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(engine, OCI layout of the image) built by scripts/build-image.sh with a secret."""
    engine = _engine()
    base = next((b for b in (_default_base(), LOCAL_BASE) if _has_image(engine, b)), None)
    if base is None:
        pytest.skip(
            f"no base image in local storage: scripts/build-base-image.sh makes {LOCAL_BASE}"
        )
    scratch = tmp_path_factory.mktemp("image")
    pip_conf = scratch / "pip.conf"
    cert = os.environ.get("PIP_CERT")
    pip_conf.write_text(
        "[global]\n" + ("cert = /run/secrets/ca.crt\n" if cert else "") + f"# {MARKER}\n"
    )
    environment = {**os.environ, "IMAGE": IMAGE, "BASE_IMAGE": base, "PIP_CONF": str(pip_conf)}
    result = subprocess.run(
        ["bash", "scripts/build-image.sh"],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    layout = scratch / "oci"
    subprocess.run(
        [engine, "push", "--quiet", IMAGE, f"oci:{layout}"], check=True, capture_output=True
    )
    yield engine, layout
    subprocess.run([engine, "rmi", IMAGE], capture_output=True, check=False)


def _blob(layout: Path, digest: str) -> Path:
    algorithm, value = digest.split(":")
    return layout / "blobs" / algorithm / value


def _manifest_and_config(layout: Path) -> tuple[dict, dict]:  # type: ignore[type-arg]
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads(_blob(layout, index["manifests"][0]["digest"]).read_text())
    config = json.loads(_blob(layout, manifest["config"]["digest"]).read_text())
    return manifest, config


def _layer_names(layout: Path, digest: str) -> list[str]:
    with tarfile.open(_blob(layout, digest), mode="r:*") as layer:
        return [member.name.removeprefix("./") for member in layer.getmembers()]


def test_history_holds_no_secret_and_no_index(built: tuple[str, Path]) -> None:
    """No history entry carries the secret, an index URL or a credential-bearing URL."""
    _, layout = built
    _, config = _manifest_and_config(layout)
    history = " ".join(entry.get("created_by", "") for entry in config["history"])
    assert MARKER not in history
    assert not re.search(r"index[-_]url|PIP_INDEX|PIP_EXTRA|://[^/\s]+:[^/\s]+@", history, re.I)
    assert MARKER not in json.dumps(config)


def test_final_layer_adds_only_the_venv(built: tuple[str, Path]) -> None:
    """The image's own layer (the runtime stage: removals and the venv) adds files under
    /opt/podresources-exporter only; outside it there are only whiteouts (the base's pip
    and kin, removed), their folders, and empty mount points the engine left. No
    installer in it."""
    _, layout = built
    manifest, _ = _manifest_and_config(layout)
    with tarfile.open(_blob(layout, manifest["layers"][-1]["digest"]), mode="r:*") as layer:
        members = {m.name.removeprefix("./"): m for m in layer.getmembers()}
    assert "opt/podresources-exporter/bin/podresources-exporter" in members
    added_elsewhere = [
        name
        for name, member in members.items()
        if not name.startswith("opt/")
        and not member.isdir()
        and not name.rpartition("/")[2].startswith(".wh.")
        and not (name in MOUNT_POINTS and member.size == 0)
    ]
    assert [] == added_elsewhere
    assert [] == [n for n in members if n.startswith("opt/") and INSTALLERS.search("/" + n)]


def test_no_installer_and_no_secret_anywhere(built: tuple[str, Path]) -> None:
    """Across all layers, what is left after the last one: nothing that installs software
    (pip, setuptools, wheel, ensurepip, wheels), and the secret in no file."""
    _, layout = built
    manifest, _ = _manifest_and_config(layout)
    present: set[str] = set()
    for layer in manifest["layers"]:
        with tarfile.open(_blob(layout, layer["digest"]), mode="r:*") as archive:
            for member in archive.getmembers():
                name = member.name.removeprefix("./")
                folder, _, base = name.rpartition("/")
                if base == ".wh..wh..opq":
                    present = {p for p in present if not p.startswith(folder + "/")}
                elif base.startswith(".wh."):
                    gone = f"{folder}/{base[4:]}" if folder else base[4:]
                    present = {p for p in present if p != gone and not p.startswith(gone + "/")}
                else:
                    present.add(name)
                if member.isfile() and member.size < 1 << 20:
                    handle = archive.extractfile(member)
                    assert handle is None or MARKER.encode() not in handle.read(), name
    assert [] == sorted(p for p in present if INSTALLERS.search("/" + p))


def test_runs_unprivileged_with_the_locked_dependencies(built: tuple[str, Path]) -> None:
    """User 65534, the console script as entrypoint, and exactly the locked versions."""
    _, layout = built
    manifest, config = _manifest_and_config(layout)
    assert ("65534:65534", ["podresources-exporter"]) == (
        config["config"]["User"],
        config["config"]["Entrypoint"],
    )
    locked = {
        (name.lower().replace("_", "-"), version)
        for name, version in re.findall(
            r"^([A-Za-z0-9_.-]+)==(\S+)", (REPO / "requirements.lock").read_text(), re.M
        )
    }
    installed = set()
    for name in _layer_names(layout, manifest["layers"][-1]["digest"]):
        match = re.search(r"site-packages/([^/]+)-([^-/]+)\.dist-info/METADATA$", name)
        if match and match.group(1) != "podresources_exporter":
            installed.add((match.group(1).lower().replace("_", "-"), match.group(2)))
    assert locked == installed
