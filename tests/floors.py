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
    """``pip <command> <args>`` without dependencies, by this interpreter's pip; where
    it fails (no index reachable) the test skips, saying it could not get ``what``."""
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
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no message"])[-1]
        pytest.skip(f"pip cannot get {what} here: {reason}")
