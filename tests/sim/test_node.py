"""SimulatedNode's lifecycle: what --demo and the tests start and stop."""

from __future__ import annotations

import asyncio
import threading
import time

from exporter.sim.node import SimulatedNode
from exporter.sim.scenario import DemoScenario


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
