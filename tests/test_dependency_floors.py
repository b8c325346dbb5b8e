"""The runtime dependencies at the lowest versions pyproject.toml allows.

The suite runs the newest releases the venv installs, but a user's pip keeps any release
already installed that the ranges admit (an image that pins aiohttp or structlog for
another program), down to the floors pyproject.toml states. Here exactly those floors
are installed beside the venv's, ahead of them on the path, and the tests of the code
that leans on each run against them: aiohttp before 3.14.4 never closed a connection
that sends nothing, which tests/test_web.py's timeouts show. nvidia-ml-py has its own
test, through the fake NVML (collectors/nvml/test_oldest_bindings.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from floors import floors, pip_or_skip
from freshprocess import REPO_ROOT, with_repo_path
from packaging.version import Version

# The tests that exercise each floor: the web server's connection handling (aiohttp),
# basic auth (bcrypt), the web config (PyYAML), the logs (structlog), the kubelet client
# (grpcio, protobuf).
FLOOR_TESTS = (
    "tests/test_web.py::TestConnectionTimeouts",
    "tests/test_auth.py",
    "tests/test_webconfig.py",
    "tests/test_logs.py",
    "tests/kubelet/test_client.py",
)
OWN_TEST = {"nvidia-ml-py"}
# The version of each distribution the subprocess finds first on its path.
VERSION_SCRIPT = """
import importlib.metadata, json
names = {names!r}
print(json.dumps({{name: importlib.metadata.version(name) for name in names}}))
"""


@pytest.fixture(scope="module")
def floor_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding exactly the floors, but nvidia-ml-py's."""
    site = tmp_path_factory.mktemp("floors")
    wanted = [f"{name}=={version}" for name, version in floors().items() if name not in OWN_TEST]
    pip_or_skip(
        "install", "--prefer-binary", "--target", str(site), *wanted, what=f"the floors {wanted}"
    )
    return site


def _in(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python <args>`` with ``site`` ahead of the venv's packages."""
    environment = with_repo_path(os.environ)
    environment["PYTHONPATH"] = f"{site}{os.pathsep}{environment['PYTHONPATH']}"
    return subprocess.run(
        [sys.executable, *args],
        env=environment,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_the_tests_pass_on_the_floors(floor_site: Path) -> None:
    """The floors are what the subprocess imports, and the tests of the code on them pass."""
    expected = {name: version for name, version in floors().items() if name not in OWN_TEST}
    seen = _in(floor_site, "-c", VERSION_SCRIPT.format(names=sorted(expected)))
    assert seen.returncode == 0, seen.stderr[-2000:]
    imported = json.loads(seen.stdout)
    assert {n: Version(v) for n, v in expected.items()} == {
        n: Version(v) for n, v in imported.items()
    }
    ran = _in(floor_site, "-m", "pytest", "-q", "-p", "no:cacheprovider", *FLOOR_TESTS)
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
