"""`make unit`'s xdist_group marks hold, and the guard speaks when they do not."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("xdist", reason="pytest-xdist is in the test extras: make venv")

GROUPED = """
import pytest

pytestmark = pytest.mark.xdist_group("shared")


@pytest.mark.parametrize("n", range(4))
def test_grouped(n):
    pass
"""
# What pytest 9.2 does to xdist's "@group" suffix (pytest-xdist#1386), done on purpose:
# the suffix taken off each test's id after xdist added it.
SUFFIX_LOST = """
import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    for item in items:
        item._nodeid = item.nodeid.partition("@")[0]
"""


def _run(folder: Path) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    environment.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "xdist_groups", "-p", "no:cacheprovider"),
            *("-n", "2", "--dist", "loadgroup", "-v", "-o", "addopts="),
        ],
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _tree(folder: Path, *, lose_suffix: bool) -> None:
    for name in ("test_a.py", "test_b.py"):
        (folder / name).write_text(GROUPED)
    (folder / "pytest.ini").write_text("[pytest]\n")
    if lose_suffix:
        (folder / "conftest.py").write_text(SUFFIX_LOST)


def test_grouped_tests_of_two_modules_run_on_one_worker(tmp_path: Path) -> None:
    _tree(tmp_path, lose_suffix=False)
    ran = _run(tmp_path)
    workers = set(re.findall(r"\[(gw\d+)\].* PASSED test_[ab]\.py::\S+@shared", ran.stdout))
    assert (0, 1) == (ran.returncode, len(workers)), ran.stdout[-3000:] + ran.stderr[-2000:]


def test_grouped_tests_that_lost_their_group_fail_saying_why(tmp_path: Path) -> None:
    _tree(tmp_path, lose_suffix=True)
    ran = _run(tmp_path)
    assert ran.returncode != 0, ran.stdout[-3000:]
    assert "lost their xdist_group mark" in ran.stdout
    assert "pytest-xdist#1386" in ran.stdout
    assert " PASSED " not in ran.stdout  # no grouped test ran on whichever worker
