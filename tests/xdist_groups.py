"""The ``xdist_group`` mark `make unit` groups tests by, and a guard for when it does not.

Imported by tests/conftest.py, whose hooks these become; a plugin of its own (``-p
xdist_groups``) for the test of the guard.
"""

from __future__ import annotations

import os

import pytest

__all__ = ["pytest_collection_finish", "pytest_configure", "pytest_runtest_setup"]


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist registers the mark too; here for a plain run where it is absent.
    config.addinivalue_line(
        "markers", "xdist_group(name): run on one worker under `make unit` (--dist loadgroup)"
    )


_GROUPS_LOST = pytest.StashKey[str]()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Notice an xdist worker whose ``xdist_group`` marks did not take.

    Under ``--dist loadgroup`` a worker appends ``@<group>`` to a marked test's id, and
    the id is all the scheduler groups by. Under pytest 9.2 the suffix no longer takes
    (pytest-xdist#1386): the groups are spread over the workers without a word, and a
    module's image build or Prometheus is set up on each of them at once.
    """
    # xdist's worker sets ``loadgroup`` (its ``dist`` is "no": workers do not distribute).
    if "PYTEST_XDIST_WORKER" not in os.environ or not session.config.getoption("loadgroup", False):
        return
    lost = [
        item.nodeid
        for item in session.items
        if item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid
    ]
    if lost:
        session.config.stash[_GROUPS_LOST] = (
            f"--dist loadgroup: {len(lost)} tests lost their xdist_group mark, so they would"
            " run on any worker: this pytest and pytest-xdist do not group"
            " (pytest-xdist#1386; pyproject.toml's test extras pin a pytest that does)"
        )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # A worker's own errors never reach the terminal, so each grouped test fails with
    # the reason, before its fixtures start anything twice.
    lost = item.config.stash.get(_GROUPS_LOST, None)
    if lost is not None and item.get_closest_marker("xdist_group") is not None:
        pytest.fail(lost, pytrace=False)
