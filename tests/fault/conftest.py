"""Fixtures of the fault matrix."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from faultkit import ExporterProcess, start_exporter

from exporter.sim.node import SimulatedNode


@pytest.fixture
async def running(sim_node: SimulatedNode, tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """Start exporter processes against ``sim_node``; every one is stopped at the end."""
    started: list[ExporterProcess] = []

    async def start(*extra: str, **options: Any) -> ExporterProcess:
        exporter = await start_exporter(sim_node, tmp_path, *extra, **options)
        started.append(exporter)
        return exporter

    yield start
    for exporter in started:
        if exporter.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                exporter.signal(signal.SIGKILL)
            await exporter.process.wait()
