"""Shared fixtures: a simulated node on a real unix socket and an exporter polling it."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import structlog
from cpu_budget import usable_cpus
from scratch import memory_parent, scratch_folder
from xdist_groups import (  # noqa: F401  the xdist_group mark and its guard: hooks here
    pytest_collection_finish,
    pytest_configure,
    pytest_runtest_setup,
)

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # before gRPC's core starts

from exporter.cli import ENV_PREFIX
from exporter.sim.node import SimulatedNode
from exporter.sim.scenario import DemoScenario

# Each flag's default may come from PODRESOURCES_EXPORTER_<FLAG>: one left in the shell
# that runs the tests (a console log format for `make demo`, say) reached every exporter
# the tests start as a process, which inherits this environment, and failed them.
for _variable in [name for name in os.environ if name.startswith(ENV_PREFIX)]:
    del os.environ[_variable]


@pytest.hookimpl(optionalhook=True)  # a hook of xdist's: a run without it is fine too
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: a worker per CPU this process may keep busy, a container's CPU quota
    counted (cpu_budget.py). Where PYTEST_XDIST_AUTO_NUM_WORKERS is set, xdist reads it."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return usable_cpus()


@pytest.fixture(autouse=True)
def _quiet_structlog() -> None:
    # Tests read what the exporter logs through structlog's capture, not stderr.
    structlog.reset_defaults()


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary folder with a short path (unix socket paths end at 108 bytes), in
    memory where the machine has room (scratch.py)."""
    with scratch_folder("prx") as path:
        yield path


@pytest.fixture
def tempfile_in_memory(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """tempfile's new folders in memory where the machine has room (scratch.py): where
    an in-process --demo node, or one made without a root, lays out its tree."""
    tmp_path_factory.getbasetemp()  # tmp_path's base stays where it is, on disk
    parent = memory_parent()
    if parent is not None:
        monkeypatch.setattr(tempfile, "tempdir", parent)


@pytest.fixture
def socket_path(short_tmp: Path) -> str:
    """Where a simulated kubelet listens."""
    return str(short_tmp / "kubelet.sock")


@pytest.fixture
async def sim_node(short_tmp: Path) -> AsyncIterator[SimulatedNode]:
    """The demo scenario served by a real grpc.aio kubelet on a unix socket."""
    node = SimulatedNode(DemoScenario.create(), root=short_tmp)
    await node.start()
    yield node
    await node.stop()
