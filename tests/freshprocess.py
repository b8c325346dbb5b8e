"""Run a Python script in a fresh interpreter, this checkout's exporter first on its path:
for what only a new process shows (which modules an import loads, a hang at exit)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Collection, Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def with_repo_path(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with this checkout first on PYTHONPATH, keeping what was there (the
    packages of a machine that has them on PYTHONPATH, not in a venv)."""
    inherited = env.get("PYTHONPATH")
    path = f"{REPO_ROOT}{os.pathsep}{inherited}" if inherited else str(REPO_ROOT)
    return {**env, "PYTHONPATH": path}


def run_python(
    script: str, *, timeout: float = 60, check: bool = True, unset: Collection[str] = ()
) -> subprocess.CompletedProcess[str]:
    """``python -c script`` from the repository root, with this environment less the
    variables in ``unset``; the timeout bounds a hang, it measures nothing."""
    env = {key: value for key, value in os.environ.items() if key not in unset}
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        env=with_repo_path(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
    )
