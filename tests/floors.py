"""The lowest release of each runtime dependency pyproject.toml allows, and pip to fetch
them: for the tests that run the exporter on those floors."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest
from freshprocess import REPO_ROOT
from packaging.requirements import Requirement

__all__ = ["floors", "pip_or_skip"]


def floors() -> dict[str, str]:
    """Each runtime dependency's lowest allowed release, from its ``>=`` bound."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    found: dict[str, str] = {}
    for text in project["dependencies"]:
        requirement = Requirement(text)
        lowest = [s.version for s in requirement.specifier if s.operator == ">="]
        assert len(lowest) == 1, f"{text}: no single >= bound"
        found[requirement.name] = lowest[0]
    return found


def pip_or_skip(command: str, *args: str, what: str) -> None:
    """``pip <command> <args>`` without dependencies, by this interpreter's pip. Where
    no index can be reached the test skips, saying it could not get ``what``; where
    ``what`` cannot be built or is not on the index, it fails."""
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pip", command, "--quiet", "--no-deps"),
            *("--disable-pip-version-check", *args),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode == 0:
        return
    reason = (done.stderr.strip().splitlines() or ["no message"])[-1]
    # A floor that does not build, or that the index lacks, is the project's fault and
    # fails; an index that cannot be reached (pip then lists no version at all) is the
    # machine's, and skips.
    failed_to_build = "Failed to build" in done.stderr
    lacking = "No matching distribution" in done.stderr
    if failed_to_build or (lacking and "(from versions: none)" not in done.stderr):
        pytest.fail(f"pip cannot install {what} on Python {sys.version.split()[0]}: {reason}")
    pytest.skip(f"pip cannot get {what} here: {reason}")
