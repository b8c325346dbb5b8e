"""SimulatedNode's lifecycle: what --demo and the tests start and stop."""

from __future__ import annotations

import asyncio
import errno
import shutil
import threading
import time
from collections.abc import Callable

import pytest
from structlog.testing import capture_logs

from exporter.model import ContainerResources
from exporter.sim.node import SimulatedNode
from exporter.sim.scenario import CHURN_PERIOD_TICKS, DemoScenario


@pytest.mark.usefixtures("tempfile_in_memory")  # the nodes make their own roots
class TestStop:
    async def test_a_tick_writing_at_stop_leaves_no_tree_behind(self) -> None:
        """Stopped while a tick writes the tree (in a thread the ticker's cancellation
        does not stop): the temporary root is gone afterwards. It was left behind by
        about one --demo in two (0.5-1.8 MB in /tmp each)."""
        node = SimulatedNode(DemoScenario.create())
        await node.start(tick_interval_s=0.01)
        writing = threading.Event()
        write = node._write

        def slow_write() -> None:
            writing.set()
            time.sleep(0.3)
            write()

        node._write = slow_write  # type: ignore[method-assign]
        await asyncio.to_thread(writing.wait, 5)
        await node.stop()
        await asyncio.sleep(0.5)  # past the write, had it been left running
        assert not node.root.exists()

    async def test_a_tick_that_cannot_write_leaves_the_node_ticking(self) -> None:
        """Out of file descriptors, a tick's write fails: one warning, the node keeps its
        last tick, the next ticks go on, and stop() is clean (the ticker used to die
        silently and stop() re-raised its error: a traceback and exit 1 at SIGTERM)."""
        node = SimulatedNode(DemoScenario.create())
        write = node._write
        writes = 0

        def write_or_fail() -> None:
            nonlocal writes
            writes += 1
            if 2 <= writes <= 4:  # start()'s own write works, the next three ticks fail
                raise OSError(errno.EMFILE, "Too many open files")
            write()

        node._write = write_or_fail  # type: ignore[method-assign]
        with capture_logs() as logs:
            await node.start(tick_interval_s=0.01)
            try:
                for _ in range(500):
                    if writes >= 7:
                        break
                    await asyncio.sleep(0.01)
                await node.stop()
            finally:
                await node.kubelet.stop()  # whatever stop() did: else the test run hangs
        events = [
            (e["event"], e["log_level"]) for e in logs if e["event"] != "simulated_node_started"
        ]
        assert [
            ("simulated_node_tick_failed", "warning"),
            ("simulated_node_tick_recovered", "info"),
        ] == events
        assert "Too many open files" in logs[1]["error"]
        assert (True, False) == (writes >= 7, node.root.exists())

    @staticmethod
    def _failing_writes(node: SimulatedNode, fails: Callable[[int], Exception | None]) -> list[int]:
        """Makes the node's n-th write (start()'s is the first) raise ``fails(n)`` where
        that is an exception; the list holds the count of writes so far."""
        write = node._write
        writes = [0]

        def write_or_fail() -> None:
            writes[0] += 1
            error = fails(writes[0])
            if error is not None:
                raise error
            write()

        node._write = write_or_fail  # type: ignore[method-assign]
        return writes

    @staticmethod
    async def _until_written(writes: list[int], count: int) -> None:
        for _ in range(500):  # a bound, not a timing assertion
            if writes[0] >= count:
                return
            await asyncio.sleep(0.01)

    async def test_the_failed_and_recovered_lines_name_their_ticks(self) -> None:
        """The warning names the tick that could not be written, the recovery the first
        tick written again: where the demo's counters jump."""
        node = SimulatedNode(DemoScenario.create())
        writes = self._failing_writes(
            node, lambda n: OSError(errno.ENOSPC, "No space left") if n in (2, 3) else None
        )
        with capture_logs() as logs:
            await node.start(tick_interval_s=0.01)
            try:
                await self._until_written(writes, 5)
                await node.stop()
            finally:
                await node.kubelet.stop()
        assert [("simulated_node_tick_failed", 1), ("simulated_node_tick_recovered", 3)] == [
            (e["event"], e["tick"]) for e in logs if e["event"] != "simulated_node_started"
        ]

    async def test_a_bug_in_a_tick_is_not_told_as_a_write_that_failed(self) -> None:
        """Only OSError (no descriptors, no disk) is waited out: anything else is a bug,
        which ends the ticker and comes out of stop() rather than being logged once as a
        write failure and retried forever."""
        node = SimulatedNode(DemoScenario.create())
        writes = self._failing_writes(node, lambda n: ValueError("a bug") if n == 2 else None)
        with capture_logs() as logs:
            await node.start(tick_interval_s=0.01)
            try:
                await self._until_written(writes, 2)
                with pytest.raises(ValueError, match="a bug"):
                    await node.stop()
            finally:
                await node.kubelet.stop()
                shutil.rmtree(node.root, ignore_errors=True)
        assert not [e for e in logs if e["event"].startswith("simulated_node_tick")]


class TestDemoKubeletState:
    def test_restartable_init_containers_come_first(self) -> None:
        """The kubelet's List and Get walk the pod's restartable init containers (sidecars)
        before its containers (pkg/kubelet/apis/podresources/server_v1.go), so trainer-0's
        log-shipper sidecar is its first container, not its last."""
        pods = DemoScenario.create().state_at(0).pods
        trainer = next(p for p in pods if (p.namespace, p.name) == ("ml-training", "trainer-0"))
        assert [c.name for c in trainer.containers] == ["log-shipper", "trainer"]

    def test_pods_holding_nothing_are_listed(self) -> None:
        """The kubelet lists every active pod, whatever it holds (server_v1.go List):
        the demo has pods with no device, CPU, memory or claim."""
        pods = DemoScenario.create().state_at(0).pods
        empty = {
            (p.namespace, p.name)
            for p in pods
            if all(c == ContainerResources(c.name) for c in p.containers) and not p.cpu_ids
        }
        assert {
            ("default", "web-frontend-5c7b9"),
            ("kube-system", "nvidia-device-plugin-x2k8f"),
        } <= empty

    def test_the_batch_pod_comes_and_goes_every_churn_period(self) -> None:
        """The etl pod lives for CHURN_PERIOD_TICKS ticks, is gone as long, then a new one
        comes: the same pods within a period."""
        scenario = DemoScenario.create()

        def batch(tick: int) -> list[str]:
            return [p.name for p in scenario.state_at(tick).pods if p.namespace == "batch"]

        assert [batch(t) for t in range(0, 4 * CHURN_PERIOD_TICKS, CHURN_PERIOD_TICKS)] == [
            ["etl-0"],
            [],
            ["etl-1"],
            [],
        ]
        assert {tuple(batch(t)) for t in range(CHURN_PERIOD_TICKS)} == {("etl-0",)}
