"""A whole simulated node: kubelet socket, sysfs/procfs fixture tree and GPUs, ticking.

``--demo`` runs one inside the exporter's process; tests and the benchmark run one
beside the exporter. Every ``advance`` moves the scenario one tick: pods come and go,
counters grow.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from pathlib import Path

import structlog

from exporter.sim.fixtures import dra as dra_files
from exporter.sim.fixtures import write_tree
from exporter.sim.kubelet import SimKubelet
from exporter.sim.scenario import DraScenario, Scenario

__all__ = ["SimulatedNode"]

log = structlog.get_logger(__name__)


class SimulatedNode:
    def __init__(self, scenario: Scenario, *, root: Path | None = None) -> None:
        self.scenario = scenario
        self._owns_root = root is None
        # A short path: unix socket paths are limited to 108 bytes.
        self.root = root if root is not None else Path(tempfile.mkdtemp(prefix="prx-sim-"))
        self.sysfs = self.root / "sys"
        self.procfs = self.root / "proc"
        # DRA drivers' checkpoints and metadata, and CDI specs: --path.kubelet-plugins
        # and --path.cdi.
        self.kubelet_plugins = self.root / "kubelet-plugins"
        self.cdi = self.root / "cdi"
        self.pod_logs = self.root / "log" / "pods"
        self.socket_path = str(self.root / "kubelet.sock")
        self.kubelet = SimKubelet(socket_path=self.socket_path)
        self.tick = 0
        self._ticker: asyncio.Task[None] | None = None
        self._writing: asyncio.Future[None] | None = None  # the tree being written

    def exporter_flags(self) -> list[str]:
        """The flags that point an exporter at this node."""
        return [
            "--kubelet.socket",
            self.socket_path,
            "--path.sysfs",
            str(self.sysfs),
            "--path.procfs",
            str(self.procfs),
            "--path.kubelet-plugins",
            str(self.kubelet_plugins),
            "--path.cdi",
            str(self.cdi),
            "--path.pod-logs",
            str(self.pod_logs),
        ]

    def _write(self) -> None:
        write_tree(
            sysfs=self.sysfs,
            procfs_root=self.procfs,
            hardware=self.scenario.hardware,
            tick=self.tick,
            pod_logs=self.pod_logs,
        )
        dra_files.write(
            plugins=self.kubelet_plugins,
            cdi=self.cdi,
            procfs_root=self.procfs,
            claims=self.scenario.dra_claims if isinstance(self.scenario, DraScenario) else (),
        )

    def _apply(self) -> None:
        state = self.scenario.state_at(self.tick)
        self.kubelet.set_state(pods=state.pods, allocatable=state.allocatable)

    async def start(self, *, tick_interval_s: float | None = None) -> None:
        """Lay out the tree, start the kubelet; tick every interval when one is given."""
        await asyncio.to_thread(self._write)
        self._apply()
        await self.kubelet.start()
        if tick_interval_s is not None:
            self._ticker = asyncio.create_task(self._tick_forever(tick_interval_s))
        log.info("simulated_node_started", root=str(self.root), socket=self.socket_path)

    async def advance(self) -> None:
        """One tick later: new counters in the tree, the scenario's pods at the kubelet."""
        self.tick += 1
        # Shielded: cancelling the ticker does not stop the thread, so stop() waits
        # for this write before removing the tree (else the write leaves half of it).
        self._writing = asyncio.ensure_future(asyncio.to_thread(self._write))
        await asyncio.shield(self._writing)
        self._apply()

    async def _tick_forever(self, interval_s: float) -> None:
        failing = False
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.advance()
            except OSError as error:
                # Out of file descriptors or disk: the node stays at its last tick (the
                # exporter keeps serving it) and the next tick tries again.
                if not failing:
                    log.warning("simulated_node_tick_failed", tick=self.tick, error=str(error))
                failing = True
            else:
                if failing:
                    log.info("simulated_node_tick_recovered", tick=self.tick)
                failing = False

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        if self._writing is not None:
            with contextlib.suppress(OSError):
                await self._writing
        await self.kubelet.stop()
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)
