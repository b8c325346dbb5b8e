"""A plain wheel of the project carries the generated stubs and a working console script."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import exporter

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_installs_a_working_exporter(tmp_path: Path) -> None:
    """Build the wheel, install it alone into a folder, run its script: stubs load from it."""
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = (tmp_path / "dist").glob("podresources_exporter-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in (
        "exporter/kubelet/api/v1/api_pb2.py",
        "exporter/kubelet/api/v1/api_pb2_grpc.py",
        "exporter/kubelet/api/v1alpha1/api_pb2.py",
        "exporter/py.typed",
    ):
        assert expected in names
    assert not any(n.startswith("tests/") for n in names)

    target = tmp_path / "installed"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    # Dependencies come from this environment; the exporter itself only from the wheel.
    env = {**os.environ, "PYTHONPATH": str(target)}
    script = target / "bin" / "podresources-exporter"
    version = subprocess.run(
        [sys.executable, str(script), "--version"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert version.returncode == 0, version.stderr
    assert f"podresources-exporter {_pyproject_version()}\n" == version.stdout
    origin = subprocess.run(
        [sys.executable, "-c", "import exporter.kubelet.api.v1.api_pb2 as m; print(m.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert origin.stdout.strip().startswith(str(target)), origin.stdout + origin.stderr


def _pyproject_version() -> str:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert isinstance(version, str)
    return version


def test_package_version_is_pyprojects() -> None:
    """exporter.__version__, a literal, is the version pyproject.toml gives the wheel."""
    assert _pyproject_version() == exporter.__version__
